"""Subscriptions: a stream of messages with acks, reconnect and exact resume."""

import random
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

from . import _wire as w
from ._conn import Conn, net_error
from ._epochs import Position, epoch_start_of, parse_history, resume_point
from .errors import (InvalidInput, NetworkError, NoMaster, ProtocolError, ServerStopping, SmssError, SubscriberExists,
                     Timeout, TopicDeleted)

RESUME_FROM_START = 0
RESUME_FROM_END = -1

MAX_FRAME = 256 << 20


@dataclass
class Delivery:
    """A message received by a subscriber."""
    event_id: int
    ts_ms: int
    body: bytes
    raw_headers: list = field(default_factory=list)  # [(bytes, bytes)] in wire order
    next_file_id: int = 0
    next_pos: int = 0

    @property
    def headers(self):
        """Headers as (str, str) pairs (UTF-8; other bytes kept as surrogate escapes)."""
        return [(k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
                for k, v in self.raw_headers]

    def header(self, key, default=None):
        k = w.to_bytes(key, "header key")
        for hk, hv in self.raw_headers:
            if hk == k:
                return hv.decode("utf-8", "surrogateescape")
        return default


class Subscription:
    """Messages of one topic for one subscriber name (who).

    Iterate it (``for msg in sub``) or call ``get(timeout)``. A batch is
    acknowledged when the next message after it is asked for (so a crash while
    handling a message redelivers it; a handled one is never delivered again),
    or by ``ack()``. ``close()`` acknowledges what was handled and ends the
    subscription.

    Start (one of):
      from_event_id=N  deliver the messages after eventId N (0: the oldest retained)
      resume=True      after the server's stored position of (topic, who);
                       resume_new says where a who without one starts:
                       RESUME_FROM_START (0), RESUME_FROM_END (-1) or an eventId.
    Options: batch (1..255 messages per frame), ack_timeout (seconds the
    server waits for an ack, default 30), reconnect (True: on a lost
    connection, while the server still holds the same who registered
    (SubscriberExists) or while it is stopping (ServerStopping), connect
    again, also to another address, and resume
    after the last handled eventId; get(timeout) bounds the waiting),
    min_backoff/max_backoff (0.1 s / 5 s),
    idle_timeout (40 s without a frame or alive means the server is gone),
    trace_id.

    A Subscription belongs to one thread (the Client it came from may be
    shared). After a reconnect the subscription always resumes after ``last_acked``,
    the eventId of the last message handed out and handled, so nothing is
    skipped and nothing handled is delivered twice.

    Across a failover (docs/protocol.md §4.7): ``position`` is last_acked with
    the epoch the serving node placed it in (None before the first ack, or
    from a server without status). On every connection the node's epoch
    history is checked against it; when that node's history parts from the
    one consumed (a manual or degraded failover to a node left behind), the
    subscription resumes where they part instead of skipping the new
    history's messages, and calls on_history_change(addr, position,
    resume_after). from_position=Position(...) starts from a position an
    earlier Subscription reported, checked the same way. A stored position
    (resume=True) needs no check: it is itself part of the history.
    """

    def __init__(self, client, topic, who, *, from_event_id=None, resume=False, resume_new=RESUME_FROM_START,
                 batch=1, ack_timeout=30.0, reconnect=True, min_backoff=0.1, max_backoff=5.0,
                 idle_timeout=40.0, trace_id=None, from_position=None, on_history_change=None):
        self.topic = w.check_topic(topic, False)
        self.who = w.to_bytes(who, "who")
        if len(self.who) > client.opts.max_who:
            raise InvalidInput(f"who of {len(self.who)} bytes exceeds the server's limit.maxWho {client.opts.max_who}")
        if from_position is not None:
            if from_event_id is not None or resume:
                raise InvalidInput("from_position excludes from_event_id and resume")
            if not isinstance(from_position, Position) or from_position.event_id < 0:
                raise InvalidInput(f"from_position {from_position!r} must be a smss.Position with an eventId >= 0")
            from_event_id = from_position.event_id
        if resume and from_event_id is not None:
            raise InvalidInput("from_event_id and resume exclude each other")
        if from_event_id is None:
            from_event_id = 0
        if not isinstance(from_event_id, int) or from_event_id < 0:
            raise InvalidInput(f"from_event_id {from_event_id!r} must be an eventId >= 0")
        if resume and (not isinstance(resume_new, int) or resume_new < -1):
            raise InvalidInput(f"resume_new {resume_new!r} is not 0, -1 or an eventId")
        if not isinstance(batch, int) or not 1 <= batch <= 255:
            raise InvalidInput(f"batch {batch!r} must be 1..255")
        if not ack_timeout or ack_timeout <= 0:
            raise InvalidInput("ack_timeout must be positive")
        if idle_timeout <= 0 or min_backoff <= 0 or max_backoff < min_backoff:
            raise InvalidInput("idle_timeout and backoffs must be positive (max_backoff >= min_backoff)")
        self._client = client
        self._resume = resume
        self._resume_new = resume_new
        self._batch = batch
        self._ack_ns = int(ack_timeout * 1e9)
        self._reconnect = reconnect
        self._min_backoff, self._max_backoff = min_backoff, max_backoff
        self._idle = idle_timeout
        self._trace = w.trace_bytes(trace_id)
        self.last_acked = from_event_id  # eventId the next connection starts after
        self._acked_any = False
        self._conn = None
        self._pending = []   # messages of the current frame not handed out yet
        self._unacked = None  # last eventId of the frame being handled, not acked yet
        self._closed = False
        self._hdr = bytearray()
        self.reconnects = 0
        self.position = from_position
        self.history_changes = 0
        self._on_history_change = on_history_change
        self._history = None    # epoch history of the serving node; None: unknown (no status)
        self._node_last = 0     # the serving node's lastEventId when _history was read
        self._node_addr = None
        self._node_slave = False

    # --- public API ---------------------------------------------------------

    def __iter__(self):
        return self

    def __next__(self):
        return self.get(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def get(self, timeout=None):
        """The next message, blocking at most timeout seconds (None: for ever); Timeout when none came.

        Raises TopicDeleted when the server ended the subscription."""
        if self._closed:
            raise SmssError("subscription is closed")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._pending:
            return self._hand_out()
        self.ack()
        backoff = self._min_backoff
        while True:
            try:
                if self._conn is None:
                    self._open(deadline)
                if self._read_frame(deadline):
                    return self._hand_out()
            except (NetworkError, ProtocolError, SubscriberExists, ServerStopping, NoMaster) as e:
                if isinstance(e, Timeout) and getattr(e, "caller_deadline", False):
                    raise
                self._drop()
                if not self._reconnect:
                    raise
                self.reconnects += 1
                pause = random.uniform(backoff / 2, backoff)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise Timeout(f"subscribe {self._name()}: no message within the timeout (last: {e})") from e
                time.sleep(pause)
                backoff = min(backoff * 2, self._max_backoff)

    def ack(self):
        """Acknowledge the frame handed out so far (also done by the next get)."""
        if self._unacked is None or self._pending:
            return
        last, self._unacked = self._unacked, None
        self._mark(last)
        if self._conn is not None:
            try:
                self._conn.sock.sendall(struct.pack("<H", w.ACK))
            except (OSError, ssl.SSLError):
                self._drop()

    def close(self):
        """End the subscription: acknowledge what was handled and close the connection."""
        if self._closed:
            return
        self._closed = True
        if self._conn is not None and self._unacked is not None and not self._pending:
            self._mark(self._unacked)
            try:
                self._conn.sock.sendall(struct.pack("<H", w.ACK_END))
            except (OSError, ssl.SSLError):
                pass
        self._drop()

    # --- internals ----------------------------------------------------------

    def _name(self):
        return f"{self.topic.decode('utf-8', 'replace')!r} who {self.who.decode('utf-8', 'replace')!r}"

    def _mark(self, event_id):
        self.last_acked = event_id
        self._acked_any = True
        if self._history is None:
            return
        if event_id > self._node_last and self._node_slave:
            # A slave may have been promoted since its history was read (a
            # new epoch starting after what it held then): read it again. A
            # master's eventIds beyond are its own epoch's, the last entry.
            self._read_history(self._node_addr)
            if self._history is None:
                return
        self.position = Position(event_id, *epoch_start_of(self._history, event_id))

    def _read_history(self, addr):
        """Read addr's epoch history into _history (None when it has no status
        or did not answer: positions are then not placed)."""
        c = self._client
        kind, st = c._probe(addr, c.opts.probe_timeout)
        if kind != "status":
            self._history, self._node_addr = None, addr
            return
        self._history = parse_history(st)
        self._node_last = int(st.get("lastEventId", 0) or 0)
        self._node_slave = st.get("role") != "master"
        self._node_addr = addr

    def _check_position(self, addr):
        """Before subscribing at addr after last_acked: resume where addr's
        history parts from the one the position was taken in, if it does."""
        self._read_history(addr)
        pos = self.position
        if self._history is None or pos is None or pos.event_id != self.last_acked:
            return
        point, same = resume_point(self._history, pos)
        if same:
            return
        self.history_changes += 1
        self.last_acked = point
        self.position = Position(point, *epoch_start_of(self._history, point))
        if self._on_history_change is not None:
            self._on_history_change(addr, pos, point)

    def _drop(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._pending = []  # redelivered after last_acked by the next connection
        self._unacked = None
        self._hdr = bytearray()

    def _hand_out(self):
        # The frame is acknowledged by the next get(), ack() or close().
        return self._pending.pop(0)

    def _open(self, deadline):
        c = self._client
        t = c.opts.timeout if deadline is None else max(deadline - time.monotonic(), 0.001)
        addrs = c.addrs if len(c.addrs) == 1 else c.discover(t, for_subscribe=True)
        last = None
        for addr in addrs:
            try:
                conn = Conn(addr, c.opts, min(t, c.opts.attempt_timeout))
            except NetworkError as e:
                last = e
                continue
            if self._resume and not self._acked_any:
                req = w.sub_request(self.topic, self._trace, -1, self._batch, self._ack_ns, self.who, self._resume_new)
            else:
                try:
                    self._check_position(addr)
                except ProtocolError:
                    conn.close()
                    raise
                req = w.sub_request(self.topic, self._trace, self.last_acked, self._batch, self._ack_ns, self.who)
            try:
                conn.sock.sendall(req)
            except (OSError, ssl.SSLError) as e:
                conn.close()
                last = net_error(e, f"subscribe {self._name()} at {addr}")
                continue
            self._conn = conn
            return
        raise last or NetworkError(f"subscribe {self._name()}: no address")

    def _read_frame(self, deadline):
        """Read one unit of the stream. True when a data frame was queued.

        The 10-byte header is collected in self._hdr across calls, so a get()
        whose timeout runs out mid-header keeps the stream in step."""
        sock = self._conn.sock
        idle_until = time.monotonic() + self._idle
        while len(self._hdr) < 10:
            now = time.monotonic()
            if deadline is not None and deadline <= now:
                e = Timeout(f"subscribe {self._name()}: no message within the timeout")
                e.caller_deadline = True
                raise e
            if idle_until <= now:
                raise Timeout(f"subscribe {self._name()}: no frame or alive for {self._idle} s")
            limit = idle_until if deadline is None else min(idle_until, deadline)
            try:
                sock.settimeout(limit - now)
                chunk = sock.recv(10 - len(self._hdr))
            except (socket.timeout, TimeoutError):
                continue
            except (OSError, ssl.SSLError) as e:
                raise net_error(e, f"subscribe {self._name()}") from e
            if not chunk:
                raise NetworkError(f"subscribe {self._name()}: connection closed by the server")
            self._hdr += chunk
        code, rest = struct.unpack("<H8s", bytes(self._hdr))
        self._hdr = bytearray()
        try:
            return self._unit(sock, code, rest)
        except (OSError, ssl.SSLError) as e:
            raise net_error(e, f"subscribe {self._name()}") from e

    def _unit(self, sock, code, rest):
        if code == w.ALIVE:
            return False
        if code == w.SUB_END:
            self._drop()
            self._closed = True
            raise TopicDeleted(f"subscription {self._name()} ended: topic deleted or expired")
        if code == w.ERROR:
            err = w.read_error(sock, rest, self.topic.decode("utf-8", "replace"))
            err.context = f"subscribe {self._name()}"
            self._drop()
            if isinstance(err, (SubscriberExists, ServerStopping)):
                raise err
            self._closed = True
            raise err
        if code != w.OK:
            raise ProtocolError(f"subscribe {self._name()}: unexpected frame code {code}")
        count = rest[0]
        (length,) = struct.unpack_from("<I", rest, 2)
        if count == 0 or length > MAX_FRAME:
            raise ProtocolError(f"subscribe {self._name()}: data frame with {count} messages in {length} bytes")
        sock.settimeout(max(self._idle, 5.0))
        buf = w.recv_exact(sock, length)
        msgs = []
        off = 0
        for _ in range(count):
            if length - off < 40:
                raise ProtocolError("data frame shorter than its messages")
            ts, eid, fid, pos, size = struct.unpack_from("<qqqqI", buf, off)
            end = off + 40 + size
            if end > length:
                raise ProtocolError("message runs past its data frame")
            headers, body = w.decode_record(buf, off + 32, end)
            msgs.append(Delivery(eid, ts, body, headers, fid, pos))
            off = end
        if off != length:
            raise ProtocolError(f"data frame of {length} bytes holds {off} bytes of messages")
        self._pending = msgs
        self._unacked = msgs[-1].event_id
        return True
