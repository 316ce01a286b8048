"""Subscriptions: acks, resume from an eventId and from the stored position, kill -9 of the server."""

import threading
import time

import pytest

import smss


def test_from_event_id_and_batches(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    for i in range(10):
        c.publish(topic, b"m%d" % i)
    with c.subscribe(topic, "a", batch=4) as s:
        got = [s.get(5) for _ in range(10)]
    assert [m.body for m in got] == [b"m%d" % i for i in range(10)]
    ids = [m.event_id for m in got]
    assert ids == sorted(ids) and len(set(ids)) == 10
    # From an eventId: the messages after it.
    with c.subscribe(topic, "b", from_event_id=ids[6]) as s:
        assert [s.get(5).body for _ in range(3)] == [b"m7", b"m8", b"m9"]
        with pytest.raises(smss.Timeout):
            s.get(0.3)
    # An eventId beyond the server's last: refused, typed.
    with pytest.raises(smss.EventIdUnavailable):
        with c.subscribe(topic, "c", from_event_id=10 ** 12) as s:
            s.get(5)


def test_resume_stored_position(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    for i in range(6):
        c.publish(topic, b"%d" % i)
    with c.subscribe(topic, "billing", resume=True) as s:
        assert [s.get(5).body for _ in range(3)] == [b"0", b"1", b"2"]
    # close() acknowledged what was handed out: the stored position is after "2".
    with c.subscribe(topic, "billing", resume=True) as s:
        assert s.get(5).body == b"3"
        s.ack()
    with c.subscribe(topic, "billing", resume=True) as s:
        assert [s.get(5).body for _ in range(2)] == [b"4", b"5"]
    # A who never seen, starting at the end, sees only new messages.
    with c.subscribe(topic, "late", resume=True, resume_new=smss.RESUME_FROM_END) as s:
        with pytest.raises(smss.Timeout):
            s.get(0.3)
        c.publish(topic, b"new")
        assert s.get(5).body == b"new"


def test_unhandled_batch_is_redelivered(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    c.publish_batch(topic, [b"a", b"b", b"c"])
    s = c.subscribe(topic, "crashy", resume=True, batch=3)
    assert s.get(5).body == b"a"
    s._drop()  # a consumer that dies before handling the whole frame: nothing was acknowledged
    s._closed = True
    with c.subscribe(topic, "crashy", resume=True, batch=3) as s2:
        assert [s2.get(5).body for _ in range(3)] == [b"a", b"b", b"c"]


def test_topic_deleted_ends_subscription(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    s = c.subscribe(topic, "w")
    with pytest.raises(smss.Timeout):
        s.get(0.2)
    c.delete_topic(topic)
    with pytest.raises(smss.TopicDeleted):
        s.get(5)
    with pytest.raises(smss.TopicNotExist):
        c.subscribe(topic, "w2").get(5)


def test_same_who_twice_is_refused(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    c.publish(topic, b"x")
    with c.subscribe(topic, "dup") as s:
        s.get(5)
        # Refused while the first is active: retried (as after a reconnect the server
        # may still hold the old registration) until the caller's timeout.
        with pytest.raises(smss.Timeout) as ei:
            c.subscribe(topic, "dup").get(1)
        assert "regiester exist" in str(ei.value)
        with pytest.raises(smss.SubscriberExists):
            c.subscribe(topic, "dup", reconnect=False).get(5)


def test_kill9_mid_subscription_resumes_exactly(start_server, topic):
    srv = start_server()
    pub = smss.connect(srv.addr, max_retries=30, max_retry_backoff=0.3, timeout=60)
    pub.create_topic(topic)
    for i in range(100):
        pub.publish(topic, b"%d" % i)
    acked = []  # bodies whose publish returned
    stop = threading.Event()

    def publisher():
        i = 100
        while not stop.is_set() and i < 400:
            try:
                pub.publish(topic, b"%d" % i)
                acked.append(b"%d" % i)
            except smss.SmssError:
                pass
            i += 1
            time.sleep(0.002)

    sub = pub.subscribe(topic, "consumer", batch=7, min_backoff=0.05, max_backoff=0.3)
    got = []
    t = threading.Thread(target=publisher)
    t.start()
    try:
        while len(got) < 150:
            got.append(sub.get(20))
        srv.kill9()  # mid-subscription, with a frame handed out and not acknowledged
        with pytest.raises(smss.Timeout):
            while True:  # the rest of the frame is still handed out, then nothing
                got.append(sub.get(0.5))
        srv.start()
        t.join(60)
        stop.set()
        want = [b"%d" % i for i in range(100)] + acked
        while len(got) < len(want):
            got.append(sub.get(20))
    finally:
        stop.set()
        t.join(60)
    assert sub.reconnects >= 1
    assert len(acked) > 250  # the publisher carried on across the kill (retries with ids)
    bodies = [m.body for m in got]
    assert len(bodies) == len(set(bodies)), "a message was delivered twice"
    assert bodies == sorted(bodies, key=int)
    ids = [m.event_id for m in got]
    assert ids == sorted(ids)
    missing = set(want) - set(bodies)
    assert not missing, f"skipped: {sorted(missing, key=int)[:10]}"
    # Anything published whose reply was lost may be stored or not, never twice.
    with pytest.raises(smss.Timeout):
        while True:
            m = sub.get(0.5)
            assert m.body not in bodies
    sub.close()


def test_stopping_server_is_retried():
    """A server that refuses a subscription because it is stopping (a cluster node
    changing role in place) is asked again; the next answer is the one that counts."""
    import socket
    import struct

    ln = socket.create_server(("127.0.0.1", 0))
    answers = [b"server shutting down", b"topic not exist"]
    served = []

    lock = threading.Lock()

    def conn_loop(conn):
        # An alive (the client checks a new connection) is answered 200; a
        # subscribe gets the next refusal, then the connection closes.
        with conn:
            while True:
                req = conn.recv(4096)
                if not req:
                    return
                if req[0] != 0:  # not a subscribe
                    conn.sendall(struct.pack("<H8x", 200))
                    continue
                with lock:
                    text = answers[min(len(served), len(answers) - 1)]
                    served.append(text)
                conn.sendall(struct.pack("<HH6x", 400, len(text)) + text)
                return

    def serve():
        while True:
            try:
                conn, _ = ln.accept()
            except OSError:
                return
            threading.Thread(target=conn_loop, args=(conn,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        c = smss.connect("127.0.0.1:%d" % ln.getsockname()[1])
        s = c.subscribe("t", "w", resume=True, min_backoff=0.01, max_backoff=0.05)
        with pytest.raises(smss.TopicNotExist):
            s.get(10)
        assert served == answers
        assert issubclass(smss.errors.classify("server shutting down"), smss.ServerStopping)
    finally:
        ln.close()
        t.join(5)
