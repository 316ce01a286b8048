"""Work queues: queue groups of competing consumers (docs/protocol.md §12.6).

    c.create_queue("jobs", "mailers", ack_wait=30, max_deliver=5, dead_letter="jobs-dead", start="oldest")
    def handle(m):            # return: ack; raise: nak (redelivered); raise smss.Term(...): dead-letter now
        send_mail(m.body)
    c.work("jobs", "mailers", handle, count=100)

A worker holds one consumer stream on the master. An ack is done once the
server confirms it (Worker.confirmed); a message whose ack was not confirmed
may be delivered again, to this or another consumer of the group.
"""

import json
import socket
import struct
import time
from dataclasses import dataclass, field

from . import _wire as w
from ._conn import Conn
from .errors import InvalidInput, NetworkError, ProtocolError, SmssError

CMD_QUEUE_CREATE = 41
CMD_QUEUE_DELETE = 42
CMD_QUEUE_INFO = 43
CMD_QUEUE_CONSUME = 44
QUEUE_MESSAGES = 210
QUEUE_CONFIRM = 211

OP_ACK, OP_NAK, OP_PROGRESS, OP_TERM, OP_STOP = 1, 2, 3, 4, 5
RESULT_DONE, RESULT_GONE = 0, 1

_UNIT = struct.Struct("<qqII")
_OUTCOME = struct.Struct("<B3xIq")
_CONFIRM = struct.Struct("<qBB6x")


class Term(Exception):
    """Raised by a handler: dead-letter the message now, never retry it."""


class Nak(Exception):
    """Raised by a handler: deliver the message again after delay seconds."""

    def __init__(self, delay=0.0, message="nak"):
        super().__init__(message)
        self.delay = delay


@dataclass
class QueueMessage:
    """One delivery of a queue group: attempt is 1 for the first."""
    event_id: int
    attempt: int
    time_ms: int
    body: bytes
    headers: list = field(default_factory=list)


def queue_request(cmd, topic, body):
    js = json.dumps(body, separators=(",", ":")).encode()
    return w.request(cmd, w.to_bytes(topic, "topic"), b"", b"", struct.pack("<I", len(js)) + js)


def create_body(group, ack_wait, max_deliver, backoff, max_in_flight, max_in_flight_group, dead_letter, start):
    body = {"group": group}
    if ack_wait is not None:
        body["ackWaitMs"] = int(ack_wait * 1000)
    if max_deliver:
        body["maxDeliver"] = int(max_deliver)
    if backoff:
        body["backoffMs"] = [int(b * 1000) for b in backoff]
    if max_in_flight:
        body["maxInFlight"] = int(max_in_flight)
    if max_in_flight_group:
        body["maxInFlightGroup"] = int(max_in_flight_group)
    if dead_letter:
        body["deadLetter"] = dead_letter
    if start is not None:
        body["from"] = str(start)
    return body


class Worker:
    """One consumer of a group on one connection to the master."""

    def __init__(self, client, topic, group, consumer, max_in_flight, timeout):
        if not group or not consumer:
            raise InvalidInput("group and consumer are required")
        self.topic, self.group = topic, group
        self.confirmed = []  # eventIds whose ack the server confirmed as done
        self.handled = 0
        addrs = client.addrs if len(client.addrs) == 1 else client.discover(timeout)
        last = None
        for addr in addrs:
            try:
                self._conn = Conn(addr, client.opts, timeout)
                break
            except NetworkError as e:
                last = e
        else:
            raise last if last else SmssError("no address to work on")
        self._timeout = timeout
        req = queue_request(CMD_QUEUE_CONSUME, topic,
                            {"group": group, "consumer": consumer, "maxInFlight": int(max_in_flight)})
        self._conn.sock.settimeout(timeout)
        self._conn.sock.sendall(req)

    def _frame(self):
        sock = self._conn.sock
        code, rest = w.read_reply_header(sock)
        if code == w.ERROR:
            raise w.read_error(sock, rest, self.topic)
        if code == QUEUE_MESSAGES:
            n, length = struct.unpack_from("<HI", rest, 0)
            area = memoryview(w.recv_exact(sock, length))
            out, off = [], 0
            for _ in range(n):
                if len(area) - off < _UNIT.size + 8:
                    raise ProtocolError("queue frame truncated")
                ts, eid, attempt, _ = _UNIT.unpack_from(area, off)
                off += _UNIT.size
                (size,) = struct.unpack_from("<I", area, off)
                end = off + 8 + size
                if end > len(area):
                    raise ProtocolError("queue record runs past its frame")
                headers, body = w.decode_record(area, off, end)
                out.append(QueueMessage(eid, attempt, ts, body, headers))
                off = end
            return code, out
        if code == QUEUE_CONFIRM:
            (n,) = struct.unpack_from("<I", rest, 0)
            raw = w.recv_exact(sock, n * _CONFIRM.size)
            return code, [_CONFIRM.unpack_from(raw, i * _CONFIRM.size) for i in range(n)]
        if code in (w.ALIVE, w.SUB_END):
            return code, []
        raise ProtocolError(f"unexpected code {code} in a queue stream")

    def _send(self, op, event_id=0, delay=0.0):
        self._conn.sock.sendall(_OUTCOME.pack(op, int(delay * 1000), event_id))

    def _confirm(self, units):
        for eid, op, result in units:
            if op == OP_ACK and result == RESULT_DONE:
                self.confirmed.append(eid)

    def run(self, handler, count=None, idle=None):
        """Handle messages until count were handled, or no message came for idle seconds (None: no
        limit), or the stream ends."""
        try:
            while count is None or self.handled < count:
                if idle is not None:
                    self._conn.sock.settimeout(idle)
                try:
                    code, items = self._frame()
                except (socket.timeout, TimeoutError):
                    if idle is None:
                        raise
                    break  # idle: the group has nothing for this worker
                finally:
                    self._conn.sock.settimeout(self._timeout)
                if code == w.SUB_END:
                    return
                if code == QUEUE_CONFIRM:
                    self._confirm(items)
                    continue
                for m in items:
                    if count is not None and self.handled >= count:
                        self._send(OP_NAK, m.event_id, 0.001)  # not handled: back to the group at once
                        continue
                    try:
                        handler(m)
                    except Term:
                        self._send(OP_TERM, m.event_id)
                    except Nak as e:
                        self._send(OP_NAK, m.event_id, e.delay)
                    except Exception:  # the handler failed: redelivered with the group's backoff
                        self._send(OP_NAK, m.event_id)
                    else:
                        self._send(OP_ACK, m.event_id)
                    self.handled += 1
            # Stop: the outcomes sent are confirmed before the 255.
            self._send(OP_STOP)
            deadline = time.monotonic() + self._timeout
            while time.monotonic() < deadline:
                code, items = self._frame()
                if code == QUEUE_CONFIRM:
                    self._confirm(items)
                elif code == w.SUB_END:
                    return
        finally:
            self._conn.close()
