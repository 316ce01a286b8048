"""Publishing, topic admin, status, errors and timeouts against a real smss."""

import socket
import threading
import time

import pytest

import smss
from conftest import free_port, wait_for
from proxy import Proxy


def drain(c, topic, n, who="drain", timeout=10):
    """The first n messages of topic, read by a subscription from the start."""
    with c.subscribe(topic, who, batch=50) as s:
        return [s.get(timeout) for _ in range(n)]


def assert_nothing_more(c, topic, after, who="more"):
    with c.subscribe(topic, who, from_event_id=after) as s:
        with pytest.raises(smss.Timeout):
            s.get(0.3)


def test_publish_single_batch_headers(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    mid = c.publish(topic, b"\x00\x01binary\xff", {"k": "v", "empty": ""})
    assert len(mid) == 32 and int(mid, 16) >= 0
    c.publish_batch(topic, [b"one", (b"two", [("h", "2"), ("h2", "x")]), smss.Message(b"", [("only", "header")])])
    got = drain(c, topic, 4)
    assert [m.body for m in got] == [b"\x00\x01binary\xff", b"one", b"two", b""]
    assert got[0].headers == [("k", "v"), ("empty", ""), ("smss-msg-id", mid)]
    assert got[1].header("smss-msg-id") is not None  # the id is on the first record of a batch
    assert got[2].headers == [("h", "2"), ("h2", "x")]
    assert got[3].headers == [("only", "header")]
    ids = [m.event_id for m in got]
    assert ids[1:] == [ids[1], ids[1] + 1, ids[1] + 2]  # one request: consecutive eventIds
    assert_nothing_more(c, topic, ids[-1])
    c.close()


def test_duplicate_header_key_replaces_in_place(server, topic):
    c = smss.connect(server.addr, message_ids=False)
    c.create_topic(topic)
    c.publish(topic, b"b", [("a", "1"), ("b", "2"), ("a", "3")])
    (m,) = drain(c, topic, 1)
    assert m.headers == [("a", "3"), ("b", "2")]


def test_delay_publish(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    t0 = time.monotonic()
    c.publish_delay(topic, b"later", 1.0, {"d": "1"})
    c.publish_delay_batch(topic, [b"d1", (b"d2", {"n": "2"})], 1.2)
    with c.subscribe(topic, "w", batch=1) as s:
        m = s.get(10)
        assert time.monotonic() - t0 >= 0.95
        assert m.body == b"later" and m.header("d") == "1"
        rest = [s.get(10), s.get(10)]
    assert [x.body for x in rest] == [b"d1", b"d2"] and rest[1].headers == [("n", "2")]
    assert rest[1].event_id == rest[0].event_id + 1  # applied as one batch


def test_topic_admin_and_status(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    with pytest.raises(smss.TopicExist):
        c.create_topic(topic)
    info = c.topic_info(topic)
    assert info.name == topic and info.expire_at_ms == 0 and info.state == 0 and info.create_event_id > 0
    assert topic in [t.name for t in c.topics()]
    ttl_topic = topic + "_ttl"
    c.create_topic(ttl_topic, ttl=3600)
    assert c.topic_info(ttl_topic).expire_at_ms > time.time() * 1000
    st = c.status()
    assert st["role"] == "master" and st["lastEventId"] >= info.create_event_id
    c.delete_topic(topic)
    with pytest.raises(smss.TopicNotExist):
        c.topic_info(topic)
    with pytest.raises(smss.TopicNotExist):
        c.delete_topic(topic)
    with pytest.raises(smss.TopicNotExist) as ei:
        c.publish(topic, b"x")
    assert ei.value.message == "topic not exist" and topic in str(ei.value)
    with pytest.raises(smss.ExpireTooSoon):
        c.create_topic(topic, expire_at_ms=int(time.time() * 1000) + 2000)


BAD = [
    ("empty topic", lambda c: c.publish("", b"x")),
    ("topic too long", lambda c: c.publish("t" * 129, b"x")),
    ("topic with space", lambda c: c.publish("a b", b"x")),
    ("topic with slash", lambda c: c.create_topic("a/b")),
    ("topic dotdot", lambda c: c.topic_info("..")),
    ("topic with control byte", lambda c: c.create_topic("a\nb")),
    ("topic with backslash", lambda c: c.publish("a\\b", b"x")),
    ("topic '.'", lambda c: c.create_topic(".")),
    ("topic over the wire field", lambda c: c.delete_topic("t" * 70000)),
    ("empty message", lambda c: c.publish_batch("t", [smss.Message(b"")])),
    ("empty message without ids", lambda c: smss.Client(c.addrs, message_ids=False).publish("t", b"")),
    ("no messages", lambda c: c.publish_batch("t", [])),
    ("payload over limit.maxPayload", lambda c: c.publish("t", b"x" * (8 << 20))),
    ("too many records", lambda c: c.publish_batch("t", [b"x"] * 10001)),
    ("empty message id", lambda c: c.publish("t", b"x", {"smss-msg-id": ""})),
    ("message id too long", lambda c: c.publish("t", b"x", {"smss-msg-id": "i" * 129})),
    ("delay under 1 s", lambda c: c.publish_delay("t", b"x", 0.5)),
    ("delay not a number", lambda c: c.publish_delay("t", b"x", "soon")),
    ("ttl under 10 s", lambda c: c.create_topic("t", ttl=5)),
    ("trace id too long", lambda c: c.publish("t", b"x", trace_id="x" * 256)),
    ("body not bytes", lambda c: c.publish("t", 42)),
    ("header not a pair", lambda c: c.publish("t", b"x", ["k"])),
    ("who too long", lambda c: c.subscribe("t", "w" * 1025)),
    ("batch 0", lambda c: c.subscribe("t", "w", batch=0)),
    ("batch 256", lambda c: c.subscribe("t", "w", batch=256)),
    ("negative from", lambda c: c.subscribe("t", "w", from_event_id=-1)),
    ("from and resume", lambda c: c.subscribe("t", "w", from_event_id=3, resume=True)),
    ("bad resume_new", lambda c: c.subscribe("t", "w", resume=True, resume_new=-2)),
    ("bad ack timeout", lambda c: c.subscribe("t", "w", ack_timeout=0)),
    ("bad address", lambda c: smss.Client("nohostport")),
    ("unknown option", lambda c: smss.Client(c.addrs, nosuch=1)),
]


@pytest.mark.parametrize("name,call", BAD, ids=[b[0] for b in BAD])
def test_bad_input_refused_before_sending(server, name, call):
    c = smss.connect(server.addr)
    before = c.status()["lastEventId"]
    with pytest.raises(smss.InvalidInput) as ei:
        call(c)
    assert isinstance(ei.value, ValueError) and str(ei.value)
    assert c.status()["lastEventId"] == before


def test_server_limit_refusal_is_typed(start_server, topic):
    s = start_server("limit:\n  maxPayload: 1024\n")
    c = smss.connect(s.addr)  # the client's default limit is the server default (8 MiB)
    c.create_topic(topic)
    with pytest.raises(smss.LimitExceeded) as ei:
        c.publish(topic, b"x" * 2000)
    assert "limit.maxPayload" in ei.value.message
    c.publish(topic, b"small")  # the connection stays usable
    c2 = smss.connect(s.addr, max_payload=1024)
    with pytest.raises(smss.InvalidInput):
        c2.publish(topic, b"x" * 2000)


def test_connection_refused_and_timeout():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(smss.NetworkError) as ei:
        smss.connect(f"127.0.0.1:{port}", timeout=2, max_retries=1, retry_backoff=0.01)
    assert not isinstance(ei.value, smss.Timeout) and time.monotonic() - t0 < 2
    # A server that accepts and never answers: the call ends at its timeout.
    ls = socket.socket()
    ls.bind(("127.0.0.1", free_port()))
    ls.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(ls.accept()) for _ in range(8)], daemon=True).start()
    addr = "127.0.0.1:%d" % ls.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises((smss.Timeout, smss.RetriesExhausted)) as ei:
        smss.connect(addr, timeout=0.6, attempt_timeout=0.2)
    e = ei.value.last if isinstance(ei.value, smss.RetriesExhausted) else ei.value
    assert isinstance(e, smss.Timeout) and isinstance(e, TimeoutError)
    assert time.monotonic() - t0 < 3
    c = smss.Client(addr, timeout=0.5, max_retries=0)
    with pytest.raises(smss.Timeout):
        c.publish("t", b"x")
    ls.close()


def test_retry_with_message_id_stores_once(server, topic):
    px = Proxy(server.addr, free_port())
    c = smss.connect(px.addr, max_idle=0, retry_backoff=0.01)
    c.create_topic(topic)
    px.cut_replies = 1  # the server stores the first attempt; its reply is lost
    mid = c.publish(topic, b"once")
    assert px.cut_replies == 0
    (m,) = drain(c, topic, 1)
    assert m.body == b"once" and m.header("smss-msg-id") == mid
    assert_nothing_more(c, topic, m.event_id)
    # The same explicit id in a later call is a duplicate too: stored once.
    c.publish(topic, b"again", {"smss-msg-id": mid})
    assert_nothing_more(c, topic, m.event_id, who="more2")
    # Without ids a lost reply is not retried: the outcome is unknown.
    c2 = smss.connect(px.addr, max_idle=0, message_ids=False)
    px.cut_replies = 1
    with pytest.raises(smss.NetworkError):
        c2.publish(topic, b"unknown")
    px.close()


def test_several_addresses_find_the_master(start_server, topic):
    m = start_server()
    sl = start_server(args=["-role", "slave", "-host", "127.0.0.1", "-port", str(m.port)])
    dead = f"127.0.0.1:{free_port()}"
    c = smss.connect([dead, sl.addr, m.addr])
    c.create_topic(topic)
    c.publish(topic, b"via discovery")
    assert c.status()["role"] == "master"
    direct = smss.connect(sl.addr)
    assert direct.status()["role"] == "slave"
    with pytest.raises(smss.NotMaster):
        direct.publish(topic, b"x")
    wait_for(lambda: direct.status()["lastEventId"] >= c.status()["lastEventId"], what="slave caught up")
    (got,) = drain(direct, topic, 1)  # a slave serves subscriptions
    assert got.body == b"via discovery"
    # A subscriber given every address subscribes to the master, else to the slave.
    with c.subscribe(topic, "multi") as s:
        assert s.get(10).body == b"via discovery"
    only_slaves = smss.Client([dead, sl.addr])
    with only_slaves.subscribe(topic, "multi2") as s:
        assert s.get(10).body == b"via discovery"
    with pytest.raises((smss.NoMaster, smss.RetriesExhausted)):
        only_slaves.publish(topic, b"x", timeout=2)


def test_write_not_confirmed_is_retried_with_its_id_and_stored_once(start_server, topic):
    # syncSlaves 1 and no slave: every write is stored, then refused "write not confirmed".
    s = start_server("replication:\n  syncSlaves: 1\n  syncTimeoutMs: 200\n  readCommitted: false\n")
    c = smss.connect(s.addr, max_retries=2, retry_backoff=0.01)
    with pytest.raises(smss.WriteNotConfirmed):
        c.create_topic(topic)  # stored all the same; topic admin is not retried
    assert c.topic_info(topic).name == topic
    t0 = time.monotonic()
    with pytest.raises(smss.RetriesExhausted) as ei:
        c.publish(topic, b"sync")
    e = ei.value
    assert isinstance(e, smss.WriteNotConfirmed) and isinstance(e.last, smss.WriteNotConfirmed)
    assert "3 attempts" in str(e) and e.message.startswith("write not confirmed")
    assert time.monotonic() - t0 >= 0.6  # three attempts of 200 ms each
    (m,) = drain(c, topic, 1)
    assert m.body == b"sync"
    assert_nothing_more(c, topic, m.event_id)  # the retries were recognised: stored once
    # Without a message id the refusal is returned at once: a retry could store it twice.
    c2 = smss.connect(s.addr, message_ids=False, max_retries=2)
    with pytest.raises(smss.WriteNotConfirmed) as ei:
        c2.publish(topic, b"no id")
    assert not isinstance(ei.value, smss.RetriesExhausted)


def test_two_masters_of_one_epoch_refused(start_server, topic):
    """Two masters at the same epoch are a split brain: the client writes to
    neither (whatever it wrote to one would be lost when that one rejoins the
    other) and says why."""
    a, b = start_server(), start_server()
    c = smss.connect([a.addr, b.addr], timeout=3)
    with pytest.raises(smss.TwoMasters) as e:
        c.create_topic(topic)
    assert "both masters of epoch 0" in str(e.value)
    for s in (a, b):
        assert smss.connect(s.addr).status()["lastEventId"] == 0
