"""Work queues against a real smss: create, share, nak, term, dead letters, confirmed acks."""

import threading

import pytest

import smss


def test_queue_group_workers(server, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    info = c.create_queue(topic, "g", ack_wait=5, max_deliver=2, dead_letter=topic + ".dead", start="oldest")
    assert info["config"]["maxDeliver"] == 2 and info["config"]["deadLetter"] == topic + ".dead"
    # The same settings again are accepted; others are refused.
    c.create_queue(topic, "g", ack_wait=5, max_deliver=2, dead_letter=topic + ".dead", start="oldest")
    with pytest.raises(smss.ServerError, match="other settings"):
        c.create_queue(topic, "g", ack_wait=9)
    for i in range(20):
        c.publish(topic, f"job-{i}".encode())
    c.publish(topic, b"poison")
    c.publish(topic, b"term-me")

    seen, lock = [], threading.Lock()

    def handle(m):
        with lock:
            seen.append((m.body, m.attempt))
        if m.body == b"poison":
            raise RuntimeError("cannot")          # nak'd: redelivered, then dead-lettered after 2
        if m.body == b"term-me":
            raise smss.Term("never")              # dead-lettered at once

    workers = [None, None]

    def run(i):
        workers[i] = c.work(topic, "g", handle, consumer=f"w{i}", max_in_flight=2, idle=2)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    bodies = [b for b, _ in seen]
    for i in range(20):
        assert bodies.count(f"job-{i}".encode()) == 1
    assert sorted(a for b, a in seen if b == b"poison") == [1, 2]
    confirmed = workers[0].confirmed + workers[1].confirmed
    assert len(confirmed) == len(set(confirmed)) == 20
    q = c.queues(topic, "g")[0]
    assert q["acked"] == 20 and q["deadLettered"] == 2 and q["pending"] == 0
    with c.subscribe(topic + ".dead", "dlq", from_event_id=0) as s:
        dead = sorted(s.get(10).body for _ in range(2))
    assert dead == [b"poison", b"term-me"]
    c.delete_queue(topic, "g")
    assert c.queues(topic) == []
    with pytest.raises(smss.ServerError, match="no queue group"):
        c.delete_queue(topic, "g")
