"""Positions across a failover (docs/protocol.md §4.7): the resume rule, and a
subscriber that moves to a promoted slave left behind by its master."""

import subprocess

import pytest

import smss
from smss._epochs import parse_history, resume_point
from conftest import wait_for


@pytest.mark.parametrize("history,pos,point,same", [
    ([(1, 1), (2, 100)], (150, 2, 100), 150, True),                     # same epoch
    ([], (150, 0, 0), 150, True),                                       # never promoted, both
    ([(1, 51)], (80, 0, 0), 50, False),                                 # the first master's history ended
    ([(1, 51)], (40, 0, 0), 40, True),                                  # before the first promotion
    ([], (150, 2, 100), 99, False),                                     # a node that never saw the epoch
    ([(1, 1), (2, 151)], (180, 1, 1), 150, False),                      # a less advanced slave promoted
    ([(1, 1), (2, 100), (5, 300)], (150, 3, 120), 119, False),          # a parallel epoch the node never had
    ([(1, 1), (2, 100), (4, 140)], (160, 2, 100), 139, False),          # a later epoch the consumer never saw
    ([(2, 1)], (10, 1, 1), 0, False),                                   # diverged at the very start
])
def test_resume_point(history, pos, point, same):
    assert resume_point(history, smss.Position(*pos)) == (point, same)


@pytest.mark.parametrize("epochs", [
    [{"epoch": 0, "start": 1}],
    [{"epoch": 2, "start": 5}, {"epoch": 2, "start": 9}],
    [{"epoch": 2, "start": 9}, {"epoch": 3, "start": 5}],
    [{"epoch": "x", "start": 1}],
    [{"start": 1}],
    "not a list",
])
def test_bad_history_refused(epochs):
    with pytest.raises(smss.ProtocolError):
        parse_history({"epochs": epochs})


def test_subscriber_across_changed_history(bins, start_server, topic):
    """A slave left behind at eventId 10 is promoted after its master, which
    handed the subscriber eventIds up to 30, died. The promoted node numbers
    its own writes 11.. again: resuming "after 30" there would skip 20 of
    them. The subscriber, given both addresses, sees the history changed,
    resumes after 10 and takes every new message once."""
    master = start_server("timeout:\n  server:\n    alive: 200\n")
    c = smss.connect(master.addr)
    c.create_topic(topic)  # eventId 1
    for i in range(9):
        c.publish(topic, b"old%d" % i)  # 2..10
    slave = start_server("timeout:\n  server:\n    alive: 200\n",
                         args=("-role", "slave", "-host", "127.0.0.1", "-port", str(master.port)))
    sc = smss.connect(slave.addr)
    wait_for(lambda: sc.status()["lastEventId"] == 10, 20, "the slave at eventId 10")
    slave.stop()
    for i in range(9, 29):
        c.publish(topic, b"old%d" % i)  # 11..30, on the master only
    changes = []
    s = smss.connect([master.addr, slave.addr]).subscribe(
        topic, "w", on_history_change=lambda addr, pos, after: changes.append((addr, pos, after)))
    got = [s.get(10).body for _ in range(29)]
    assert got == [b"old%d" % i for i in range(29)]
    s.ack()
    assert s.position == smss.Position(30, 0, 0)

    master.kill9()
    slave.start()
    r = subprocess.run([bins["smssctl"], "--addr", slave.addr, "promote"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    nc = smss.connect(slave.addr)
    for i in range(25):
        nc.publish(topic, b"new%d" % i)  # 11..35 of the new history
    got = [s.get(20).body for _ in range(25)]
    s.close()
    assert got == [b"new%d" % i for i in range(25)], got
    assert changes == [(slave.addr, smss.Position(30, 0, 0), 10)]
    assert s.position.event_id == 35 and s.position.epoch == 1 and s.position.start == 11
