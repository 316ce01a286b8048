"""The smss client: publish, topic admin, status, subscribe."""

import os
import queue
import random
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field

from . import _wire as w
from . import workqueue as _queue
from ._conn import Conn, split_addr
from .errors import (Fenced, InvalidInput, NetworkError, NoMaster, NotMaster, NotSupported, ProtocolError, TwoMasters,
                     ServerError, SmssError, Timeout, WriteNotConfirmed, retries_exhausted)


@dataclass
class Message:
    """A message to publish: a body and ordered headers."""
    body: bytes
    headers: list = field(default_factory=list)


@dataclass
class TopicInfo:
    """One topic as the server describes it (docs/protocol.md §2.2)."""
    name: str
    create_time_ms: int
    expire_at_ms: int
    create_event_id: int
    state: int
    topic_root: str
    raw: dict

    @classmethod
    def from_json(cls, d):
        if not isinstance(d, dict):
            raise ProtocolError(f"topic info is not a JSON object: {d!r}")
        return cls(d.get("name", ""), d.get("createTimeStamp", 0), d.get("expireAt", 0),
                   d.get("createEventId", 0), d.get("state", 0), d.get("topicRoot", ""), d)


class _Options:
    def __init__(self, **kw):
        self.user = kw.pop("user", None)
        self.password = kw.pop("password", None)
        if self.user is not None and self.password is None:
            raise InvalidInput("user given without a password")
        tls = kw.pop("tls", None)
        ca = kw.pop("ca", None)
        cert = kw.pop("cert", None)
        key = kw.pop("key", None)
        self.server_name = kw.pop("server_name", None)
        if isinstance(tls, ssl.SSLContext):
            self.ssl_context = tls
        elif tls or ca or cert:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if cert:
                ctx.load_cert_chain(cert, key)
            self.ssl_context = ctx
        else:
            self.ssl_context = None
        self.connect_timeout = float(kw.pop("connect_timeout", 5.0))
        self.timeout = float(kw.pop("timeout", 30.0))
        self.attempt_timeout = float(kw.pop("attempt_timeout", 10.0))
        self.probe_timeout = float(kw.pop("probe_timeout", 1.0))
        self.max_retries = int(kw.pop("max_retries", 5))
        self.retry_backoff = float(kw.pop("retry_backoff", 0.1))
        self.max_retry_backoff = float(kw.pop("max_retry_backoff", 2.0))
        self.message_ids = bool(kw.pop("message_ids", True))
        self.max_payload = int(kw.pop("max_payload", w.DEFAULT_MAX_PAYLOAD))
        self.max_records = int(kw.pop("max_records", w.DEFAULT_MAX_RECORDS))
        self.max_who = int(kw.pop("max_who", w.DEFAULT_MAX_WHO))
        self.max_idle = int(kw.pop("max_idle", 16))
        self.ping_idle = float(kw.pop("ping_idle", 15.0))
        if kw:
            raise InvalidInput(f"unknown option(s): {', '.join(sorted(kw))}")
        for name in ("connect_timeout", "timeout", "attempt_timeout", "probe_timeout"):
            if getattr(self, name) <= 0:
                raise InvalidInput(f"{name} must be positive")


def connect(addrs, **options):
    """Return a Client for the server at addrs ("host:port") or the master among a list of them.

    Options (keywords): user, password (SCRAM-SHA-256 login on every
    connection); tls=True or an ssl.SSLContext, ca, cert, key, server_name;
    timeout (30 s, a whole call with its retries), attempt_timeout (10 s),
    connect_timeout (5 s), probe_timeout (1 s, one status probe of master
    discovery), max_retries (5), retry_backoff (0.1 s), max_retry_backoff
    (2 s), message_ids (True), max_payload / max_records / max_who (the
    server's limits, checked before sending), max_idle (16 pooled
    connections), ping_idle (15 s). The connection is checked at once.
    """
    c = Client(addrs, **options)
    try:
        c.ping()
    except BaseException:
        c.close()
        raise
    return c


def _as_messages(items):
    out = []
    for it in items:
        if isinstance(it, Message):
            out.append((it.body, it.headers))
        elif isinstance(it, (bytes, bytearray, memoryview, str)):
            out.append((it, None))
        elif isinstance(it, tuple) and len(it) == 2:
            out.append(it)
        else:
            raise InvalidInput(f"message {it!r}: want bytes, a Message or a (body, headers) pair")
    return out


class Client:
    """A thread-safe client. Calls block; each is bounded by the timeout option (or its timeout argument)."""

    def __init__(self, addrs, **options):
        if isinstance(addrs, str):
            addrs = [a for a in addrs.split(",") if a]
        seen = []
        for a in addrs or []:
            split_addr(a)
            if a not in seen:
                seen.append(a)
        if not seen:
            raise InvalidInput("no address")
        self.addrs = seen
        self.opts = _Options(**options)
        self._lock = threading.Lock()
        self._idle = {}  # addr -> [Conn]
        self._master = None if len(seen) > 1 else seen[0]
        self._closed = False

    # --- connections -------------------------------------------------------

    def _get(self, addr, timeout):
        if self._closed:
            raise SmssError("client is closed")
        while True:
            with self._lock:
                pool = self._idle.get(addr)
                c = pool.pop() if pool else None
            if c is None:
                return Conn(addr, self.opts, timeout)
            if not c.looks_alive():
                c.close()
                continue
            if time.monotonic() - c.last_used > self.opts.ping_idle:
                try:
                    c.roundtrip(w.request(w.CMD_ALIVE, b"", b""), False, min(timeout, self.opts.attempt_timeout))
                except SmssError:
                    c.close()
                    continue
            return c

    def _put(self, c):
        if c.broken or self._closed:
            c.close()
            return
        with self._lock:
            pool = self._idle.setdefault(c.addr, [])
            if len(pool) < self.opts.max_idle:
                pool.append(c)
                return
        c.close()

    def _once(self, addr, req, with_body, timeout, topic=""):
        c = self._get(addr, timeout)
        try:
            return c.roundtrip(req, with_body, timeout, topic)
        finally:
            self._put(c)

    def close(self):
        """Close every pooled connection."""
        self._closed = True
        with self._lock:
            pools, self._idle = self._idle, {}
        for pool in pools.values():
            for c in pool:
                c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- master discovery ---------------------------------------------------

    def _probe(self, addr, timeout):
        """status of addr: ("status", dict) | ("nostatus", None) | ("error", exc)."""
        try:
            body = self._once(addr, w.request(w.CMD_STATUS, b"", w.trace_bytes(None)), True, timeout)
            st = w.parse_json(body, "status")
            if not isinstance(st, dict):
                raise ProtocolError(f"status of {addr} is not a JSON object")
            return "status", st
        except NotSupported:
            return "nostatus", None
        except SmssError as e:
            return "error", e

    def _probe_all(self, timeout, stop_early):
        t = min(self.opts.probe_timeout, timeout or self.opts.probe_timeout)
        results = queue.Queue()
        for a in self.addrs:
            threading.Thread(target=lambda a=a: results.put((a,) + self._probe(a, t)), daemon=True).start()
        answers = {}
        deadline = time.monotonic() + t + 0.5
        while len(answers) < len(self.addrs):
            try:
                a, kind, v = results.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                break
            answers[a] = (kind, v)
            if stop_early and kind == "status" and _proven_cluster_master(v):
                return answers, a
        return answers, None

    def discover(self, timeout=None, for_subscribe=False):
        """Find the master among the addresses (docs/client.md, "Clients that follow the master").

        Every address's status is asked in parallel, each within probe_timeout.
        A cluster master whose own view names it master of its epoch, not
        fenced, is taken as soon as it answers; otherwise, once every probe
        answered or ran out, the master of the highest epoch, never one behind
        an epoch another node reports. Servers without status (an original)
        come after, to be tried by sending the request. for_subscribe adds,
        after the masters, the slaves of the newest epoch (a node that did not
        answer, or of an older epoch, is never used). Returns the addresses to
        try, in order."""
        answers, proven = self._probe_all(timeout, True)
        if proven is not None:
            return [proven]
        status = {a: v for a, (k, v) in answers.items() if k == "status"}
        top = max((_epoch(v) for v in status.values()), default=0)
        masters = sorted((a for a, v in status.items() if v.get("role") == "master"
                          and not (v.get("cluster") or {}).get("fenced") and int(v.get("epoch", 0) or 0) >= top),
                         key=lambda a: -int(status[a].get("epoch", 0) or 0))
        if not for_subscribe and len(masters) > 1:
            a, b = masters[0], masters[1]
            ea, eb = int(status[a].get("epoch", 0) or 0), int(status[b].get("epoch", 0) or 0)
            ia, ib = status[a].get("instance"), status[b].get("instance")
            if ea == eb and not (ia and ia == ib):
                raise TwoMasters(f"{a} and {b} are both masters of epoch {ea}; writing to either could lose what the "
                                 "other takes when one rejoins: make one follow the other (smssctl follow), or use a "
                                 "cluster (-role auto)")
        order = masters
        if for_subscribe:
            order = order + [a for a in self.addrs if a in status and a not in masters
                             and status[a].get("role") == "slave" and _epoch(status[a]) >= top]
        order += [a for a in self.addrs if answers.get(a, ("",))[0] == "nostatus"]
        if not order:
            what = "; ".join(f"{a}: {_describe(answers.get(a))}" for a in self.addrs)
            raise NoMaster(f"no reachable {'server of the newest epoch' if for_subscribe else 'master'} "
                           f"among {len(self.addrs)} addresses ({what})")
        return order

    def _readers(self, timeout):
        """Where reads go: the master, else any reachable node."""
        try:
            return self.discover(timeout)
        except NoMaster:
            return list(self.addrs)

    # --- the call loop ------------------------------------------------------

    def _call(self, op, req, with_body, topic="", kind="read", has_id=False, timeout=None):
        """Send req with the retry policy of kind ("publish", "manage", "read")."""
        total = self.opts.timeout if timeout is None else float(timeout)
        if total <= 0:
            raise InvalidInput("timeout must be positive")
        deadline = time.monotonic() + total
        backoff = self.opts.retry_backoff
        attempts = 0
        candidates = []
        last = None
        where = topic.decode("utf-8", "replace") if isinstance(topic, bytes) else topic
        ctx = f"smss {op} {where!r}" if where else f"smss {op}"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                err = last if last is not None else Timeout(f"{ctx}: timed out")
                if attempts > 1:
                    raise retries_exhausted(f"{ctx}: timed out after {attempts} attempts: {err}", err) from err
                raise err
            addr = None
            moved = False
            try:
                if self._master is not None:
                    addr = self._master
                else:
                    if not candidates:
                        candidates = (self.discover(remaining) if kind != "read" else self._readers(remaining))
                    addr = candidates.pop(0)
                attempts += 1
                body = self._once(addr, req, with_body, min(remaining, self.opts.attempt_timeout), where)
                if len(self.addrs) > 1 and kind != "read":
                    self._master = addr
                return body
            except InvalidInput:
                raise
            except NotMaster as e:
                e.context = f"{ctx} at {addr}"
                last, moved, retry = e, True, len(self.addrs) > 1
            except (WriteNotConfirmed, Fenced) as e:
                e.context = f"{ctx} at {addr}"
                last, retry = e, has_id
            except ServerError as e:
                e.context = f"{ctx} at {addr}" if addr else ctx
                raise
            except NetworkError as e:
                last = e
                many = len(self.addrs) > 1
                if kind == "publish":
                    retry = has_id or e.not_sent
                else:
                    retry = many and (kind == "read" or e.not_sent)
            except NoMaster as e:
                last, retry = e, True
            if len(self.addrs) > 1:
                self._master = None
            if not retry or attempts > self.opts.max_retries:
                if attempts > 1 and retry:
                    raise retries_exhausted(f"{ctx}: failed after {attempts} attempts: {last}", last) from last
                raise last
            if not (moved and candidates):
                time.sleep(min(random.uniform(backoff / 2, backoff), max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, self.opts.max_retry_backoff)

    # --- publishing ---------------------------------------------------------

    def publish(self, topic, body, headers=None, *, trace_id=None, timeout=None):
        """Publish one message (body: bytes; headers: a mapping or (key, value) pairs); returns its message id."""
        return self.publish_batch(topic, [(body, headers)], trace_id=trace_id, timeout=timeout)

    def publish_batch(self, topic, messages, *, trace_id=None, timeout=None):
        """Publish several messages in one request: stored together, consecutive eventIds, all or none.

        messages: bytes bodies, Message objects or (body, headers) pairs."""
        t = w.check_topic(topic, True)
        records, msg_id = w.records_payload(_as_messages(messages), self.opts.message_ids,
                                            self.opts.max_payload, self.opts.max_records)
        req = w.pub_request(t, w.trace_bytes(trace_id), records)
        self._call("publish", req, False, t, "publish", msg_id is not None, timeout)
        return msg_id.decode() if msg_id else None

    def publish_delay(self, topic, body, delay, headers=None, *, trace_id=None, timeout=None):
        """Publish one message delay seconds from now (at least 1 s)."""
        return self.publish_delay_batch(topic, [(body, headers)], delay, trace_id=trace_id, timeout=timeout)

    def publish_delay_batch(self, topic, messages, delay, *, trace_id=None, timeout=None):
        """Publish several messages, in one batch, delay seconds from now."""
        t = w.check_topic(topic, True)
        try:
            ms = int(round(float(delay) * 1000))
        except (TypeError, ValueError):
            raise InvalidInput(f"delay {delay!r} is not a number of seconds") from None
        if ms < 1000:
            raise InvalidInput(f"delay of {ms} ms: the server refuses delays under 1 second")
        records, msg_id = w.records_payload(_as_messages(messages), self.opts.message_ids,
                                            self.opts.max_payload, self.opts.max_records)
        req = w.delay_request(t, w.trace_bytes(trace_id), ms, records)
        self._call("delay publish", req, False, t, "publish", msg_id is not None, timeout)
        return msg_id.decode() if msg_id else None

    # --- topic admin --------------------------------------------------------

    def create_topic(self, topic, ttl=None, *, expire_at_ms=None, trace_id=None, timeout=None):
        """Create a topic: permanent, or deleted by the server ttl seconds from now (or at expire_at_ms)."""
        t = w.check_topic(topic, True)
        if ttl is not None and expire_at_ms is not None:
            raise InvalidInput("give ttl or expire_at_ms, not both")
        expire = 0
        if ttl is not None:
            if ttl < 10:
                raise InvalidInput(f"ttl of {ttl} s: the server refuses lifetimes under 10 s")
            expire = int(time.time() * 1000 + ttl * 1000)
        elif expire_at_ms is not None:
            expire = int(expire_at_ms)
            if expire <= 0:
                raise InvalidInput(f"expire_at_ms {expire} must be a positive ms timestamp")
        req = w.request(w.CMD_CREATE, t, w.trace_bytes(trace_id), b"", struct.pack("<q", expire))
        self._call("create topic", req, False, t, "manage", False, timeout)

    def delete_topic(self, topic, *, trace_id=None, timeout=None):
        """Delete a topic and its messages; its subscribers get TopicDeleted."""
        t = w.check_topic(topic, False)
        self._call("delete topic", w.request(w.CMD_DELETE, t, w.trace_bytes(trace_id)), False, t, "manage",
                   False, timeout)

    def topic_info(self, topic, *, trace_id=None, timeout=None):
        """Return the TopicInfo of one topic (TopicNotExist when there is none)."""
        t = w.check_topic(topic, False)
        body = self._call("topic info", w.request(w.CMD_INFO, t, w.trace_bytes(trace_id)), True, t, "read",
                          False, timeout)
        d = w.parse_json(body, "topic info")
        if d is None:
            raise ProtocolError("topic info: empty reply")
        return TopicInfo.from_json(d)

    def topics(self, *, trace_id=None, timeout=None):
        """List every topic, in name order (expired ones not reaped yet included)."""
        body = self._call("list topics", w.request(w.CMD_LIST, b"", w.trace_bytes(trace_id)), True, "", "read",
                          False, timeout)
        d = w.parse_json(body, "list topics")
        if d is None:
            return []
        if not isinstance(d, list):
            raise ProtocolError("list topics: reply is not a JSON array")
        return [TopicInfo.from_json(x) for x in d]

    def status(self, *, timeout=None):
        """The server's status (command 34) as a dict: role, epoch, lastEventId, master, ..."""
        body = self._call("status", w.request(w.CMD_STATUS, b"", w.trace_bytes(None)), True, "", "read",
                          False, timeout)
        d = w.parse_json(body, "status")
        if not isinstance(d, dict):
            raise ProtocolError("status: reply is not a JSON object")
        return d

    def ping(self, *, timeout=None):
        """Send alive (17); raises when the server cannot be reached."""
        self._call("alive", w.request(w.CMD_ALIVE, b"", w.trace_bytes(None)), False, "", "read", False, timeout)

    # --- subscribing --------------------------------------------------------

    # --- work queues (docs/protocol.md §12.6) ------------------------------

    def create_queue(self, topic, group, *, ack_wait=None, max_deliver=0, backoff=(), max_in_flight=0,
                     max_in_flight_group=0, dead_letter="", start=None, timeout=None):
        """Create a queue group on topic (the same settings again are accepted); returns its info (a dict).

        ack_wait and backoff are seconds; start is "oldest", "newest" (the server's default) or an eventId."""
        body = _queue.create_body(group, ack_wait, max_deliver, backoff, max_in_flight, max_in_flight_group,
                                  dead_letter, start)
        req = _queue.queue_request(_queue.CMD_QUEUE_CREATE, topic, body)
        return w.parse_json(self._call("queue create", req, True, topic, kind="manage", timeout=timeout),
                            "queue create")

    def delete_queue(self, topic, group, *, timeout=None):
        """Delete a queue group and its state."""
        req = _queue.queue_request(_queue.CMD_QUEUE_DELETE, topic, {"group": group})
        self._call("queue delete", req, False, topic, kind="manage", timeout=timeout)

    def queues(self, topic="", group="", *, timeout=None):
        """The queue groups of topic ("" all) named group ("" all), as dicts."""
        req = _queue.queue_request(_queue.CMD_QUEUE_INFO, topic, {"group": group})
        return w.parse_json(self._call("queue info", req, True, topic, kind="manage", timeout=timeout),
                            "queue info") or []

    def work(self, topic, group, handler, *, consumer=None, max_in_flight=1, count=None, idle=None, timeout=None):
        """Consume a queue group: handler(msg) returning acks, raising naks (redelivered), raising
        smss.Term dead-letters now, smss.Nak(delay) redelivers after delay seconds. Returns the Worker
        (its .confirmed lists the eventIds whose ack the server confirmed) once count messages were
        handled, no message came for idle seconds, or the stream ended."""
        t = self.opts.timeout if timeout is None else float(timeout)
        name = consumer or f"py-{os.getpid()}-{random.randrange(1 << 32):08x}"
        wk = _queue.Worker(self, topic, group, name, max_in_flight, t)
        wk.run(handler, count, idle)
        return wk

    def subscribe(self, topic, who, **kw):
        """Return a Subscription (see smss.subscriber.Subscription for the options)."""
        from .subscriber import Subscription
        return Subscription(self, topic, who, **kw)


def _proven_cluster_master(st):
    c = st.get("cluster") or {}
    return (st.get("role") == "master" and c.get("node") and c.get("master") == c.get("node")
            and not c.get("fenced") and int(c.get("epoch", 0) or 0) >= int(st.get("epoch", 0) or 0))


def _epoch(st):
    return max(int(st.get("epoch", 0) or 0), int((st.get("cluster") or {}).get("epoch", 0) or 0))


def _describe(ans):
    if ans is None:
        return "no answer"
    kind, v = ans
    if kind == "status":
        return f"{v.get('role')} of epoch {v.get('epoch', 0)}"
    if kind == "nostatus":
        return "no status"
    return str(v)
