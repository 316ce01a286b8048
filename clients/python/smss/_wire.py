"""Encoding and decoding of the smss wire protocol (docs/protocol.md §1, §2).

Every integer is little-endian. A request is a 20-byte header (command,
topic length, 16 command-specific bytes, traceId length), the topic, the
traceId, then the command's body. A reply starts with 10 bytes whose first
two are the status code.
"""

import json
import os
import struct

from .errors import InvalidInput, ProtocolError, server_error

CMD_SUB = 0
CMD_PUB = 1
CMD_CREATE = 2
CMD_DELETE = 3
CMD_DELAY = 16
CMD_ALIVE = 17
CMD_AUTH_START = 32
CMD_AUTH_CONTINUE = 33
CMD_STATUS = 34
CMD_INFO = 65
CMD_LIST = 100

OK = 200
ALIVE = 201
SUB_END = 255
ERROR = 400

ACK = 0
ACK_END = 1

MSG_ID_HEADER = "smss-msg-id"
MAX_MSG_ID = 128
MAX_TOPIC_FIELD = 0xFFFF
MAX_TRACE = 255
MAX_TOPIC_NAME = 128

# Server defaults of the size caps (docs/protocol.md §11 "size caps"); the
# client checks them before sending so the mistake is reported, not a 400.
DEFAULT_MAX_PAYLOAD = 8 << 20
DEFAULT_MAX_RECORDS = 10000
DEFAULT_MAX_WHO = 1024

_HDR = struct.Struct("<BH16sB")
_REPLY = struct.Struct("<H8s")


def to_bytes(v, what):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    raise InvalidInput(f"{what} must be bytes or str, not {type(v).__name__}")


def check_topic(topic, strict):
    """Validate a topic name before sending.

    strict (create, publish, delay): the server's rule (docs/protocol.md §11):
    1..128 bytes, not "." or "..", no "/", "\\", space or control byte.
    Otherwise (info, delete, subscribe, which also reach topics an original
    server created): non-empty, fits the length field, not "..", no "/".
    """
    t = to_bytes(topic, "topic")
    if not t:
        raise InvalidInput("topic name is empty")
    if len(t) > MAX_TOPIC_FIELD:
        raise InvalidInput(f"topic name of {len(t)} bytes is longer than the wire allows ({MAX_TOPIC_FIELD})")
    if t == b".." or b"/" in t:
        raise InvalidInput(f"invalid topic name {t!r}: no '/' and not '..'")
    if strict:
        if len(t) > MAX_TOPIC_NAME:
            raise InvalidInput(f"topic name of {len(t)} bytes is longer than {MAX_TOPIC_NAME}")
        if t == b".":
            raise InvalidInput("invalid topic name '.'")
        for b in t:
            if b < 0x20 or b == 0x7F or b == 0x20 or b == 0x5C:
                raise InvalidInput(f"invalid topic name {t!r}: no space, '\\\\' or control bytes")
    return t


def trace_bytes(trace_id):
    if trace_id is None:
        return os.urandom(8).hex().encode()
    t = to_bytes(trace_id, "trace_id")
    if len(t) > MAX_TRACE:
        raise InvalidInput(f"trace_id of {len(t)} bytes is longer than {MAX_TRACE}")
    return t


def request(cmd, topic=b"", trace=b"", area=b"", body=b""):
    area = area.ljust(16, b"\0")
    return _HDR.pack(cmd, len(topic), area, len(trace)) + topic + trace + body


def norm_headers(headers):
    """headers: None, a mapping or a sequence of (key, value) pairs; str or bytes."""
    if headers is None:
        return []
    items = headers.items() if hasattr(headers, "items") else headers
    out = []
    for kv in items:
        try:
            k, v = kv
        except (TypeError, ValueError):
            raise InvalidInput(f"header {kv!r} is not a (key, value) pair") from None
        k, v = to_bytes(k, "header key"), to_bytes(v, "header value")
        for i, (ek, _) in enumerate(out):
            if ek == k:  # replaces in place, as the Go client does (§1.4)
                out[i] = (k, v)
                break
        else:
            out.append((k, v))
    return out


def encode_record(body, headers):
    """One message record (docs/protocol.md §1.4)."""
    parts = [struct.pack("<I", len(headers))]
    for k, v in headers:
        parts += [struct.pack("<I", len(k)), k, struct.pack("<I", len(v)), v]
    parts.append(body)
    content = b"".join(parts)
    if len(content) == 4:  # no header, empty body: an 8-byte record the protocol cannot carry
        raise InvalidInput("empty message: no headers and an empty body")
    if len(content) > 0xFFFFFFFF - 8:
        raise InvalidInput(f"message of {len(content)} bytes does not fit a record")
    return struct.pack("<I", len(content) - 4) + content


def decode_record(buf, off, end):
    """Decode the record at buf[off:end]; returns (headers, body)."""
    if end - off < 8:
        raise ProtocolError(f"message record of {end - off} bytes, need at least 8")
    size, count = struct.unpack_from("<II", buf, off)
    if 8 + size != end - off:
        raise ProtocolError(f"record contentSize {size} does not match its {end - off - 8} bytes")
    p = off + 8
    headers = []
    for _ in range(count):
        if end - p < 4:
            raise ProtocolError("record header count runs past the record")
        (n,) = struct.unpack_from("<I", buf, p)
        p += 4
        if end - p < n + 4:
            raise ProtocolError("record header key runs past the record")
        k = bytes(buf[p:p + n])
        p += n
        (n,) = struct.unpack_from("<I", buf, p)
        p += 4
        if end - p < n:
            raise ProtocolError("record header value runs past the record")
        headers.append((k, bytes(buf[p:p + n])))
        p += n
    return headers, bytes(buf[p:end])


def records_payload(messages, message_ids, max_payload, max_records):
    """Encode messages (a list of (body, headers)) for one pub/delay request.

    Returns (records, msg_id): the first record carries the message id (the
    caller's smss-msg-id header, else a fresh one when message_ids)."""
    if not messages:
        raise InvalidInput("no messages")
    if max_records and len(messages) > max_records:
        raise InvalidInput(f"{len(messages)} messages in one request exceed the server's limit.maxRecords {max_records}")
    out = []
    msg_id = None
    key = MSG_ID_HEADER.encode()
    for i, (body, headers) in enumerate(messages):
        body = to_bytes(body, "body")
        hs = norm_headers(headers)
        if i == 0:
            for k, v in hs:
                if k == key:
                    if not 1 <= len(v) <= MAX_MSG_ID:
                        raise InvalidInput(f"message id ({MSG_ID_HEADER}) of {len(v)} bytes, want 1..{MAX_MSG_ID}")
                    msg_id = v
                    break
            else:
                if message_ids:
                    if not hs and not body:
                        raise InvalidInput("message 0: empty message: no headers and an empty body")
                    msg_id = os.urandom(16).hex().encode()
                    hs = hs + [(key, msg_id)]
        try:
            out.append(encode_record(body, hs))
        except InvalidInput as e:
            raise InvalidInput(f"message {i}: {e}") from None
    records = b"".join(out)
    if max_payload and len(records) > max_payload:
        raise InvalidInput(f"payload of {len(records)} bytes exceeds the server's limit.maxPayload {max_payload}")
    return records, msg_id


def pub_request(topic, trace, records):
    return request(CMD_PUB, topic, trace, struct.pack("<I", len(records)), records)


def delay_request(topic, trace, delay_ms, records):
    return request(CMD_DELAY, topic, trace, struct.pack("<I", len(records)), struct.pack("<q", delay_ms) + records)


def sub_request(topic, trace, event_id, batch, ack_timeout_ns, who, when_none=0):
    area = struct.pack("<BBq", batch, 1, when_none if event_id == -1 else 0)
    body = struct.pack("<qqI", event_id, ack_timeout_ns, len(who)) + who
    return request(CMD_SUB, topic, trace, area, body)


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionResetError("connection closed by the server")
        got += k
    return buf


def read_reply_header(sock):
    code, rest = _REPLY.unpack(recv_exact(sock, 10))
    return code, rest


def read_error(sock, rest, topic=""):
    (n,) = struct.unpack_from("<H", rest, 0)
    text = bytes(recv_exact(sock, n)).decode("utf-8", "replace") if n else ""
    return server_error(text, topic)


def read_reply(sock, with_body, topic=""):
    """Read a non-stream reply: 200 (plain, or with a length-prefixed body), 201, or 400.

    Returns the body bytes (b"" for a plain reply); raises the ServerError of a 400."""
    code, rest = read_reply_header(sock)
    if code == ERROR:
        raise read_error(sock, rest, topic)
    if code == ALIVE:
        return b""
    if code != OK:
        raise ProtocolError(f"unexpected reply code {code}")
    if not with_body:
        return b""
    (n,) = struct.unpack_from("<I", rest, 0)
    if n > 256 << 20:
        raise ProtocolError(f"reply body of {n} bytes")
    return bytes(recv_exact(sock, n)) if n else b""


def parse_json(body, what):
    if not body:
        return None
    try:
        return json.loads(body.decode("utf-8", "surrogateescape"))
    except ValueError as e:
        raise ProtocolError(f"{what}: reply is not JSON: {e}") from None
