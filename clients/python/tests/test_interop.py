"""Python and the Go client (smssctl) read each other's messages byte for byte."""

import base64
import json
import subprocess

import smss

BODY = bytes(range(256)) + b"\x00tail\xff"
HEADERS = [("trace", "t-1"), ("k\u00e9y", "v\u00e4lue \u2603"), ("empty", "")]


def smssctl(bins, addr, *args, stdin=None, timeout=30):
    r = subprocess.run([bins["smssctl"], "--addr", addr, *args], input=stdin, capture_output=True, timeout=timeout)
    assert r.returncode == 0, f"smssctl {' '.join(args)}: {r.stderr.decode(errors='replace')}"
    return r.stdout


def test_python_publishes_go_consumes(server, bins, topic):
    c = smss.connect(server.addr)
    c.create_topic(topic)
    c.publish(topic, BODY, HEADERS + [("smss-msg-id", "py-interop-1")])
    c.publish_batch(topic, [(b"second", {"n": "2"}), b"third"])
    out = smssctl(bins, server.addr, "--json", "sub", topic, "--who", "go", "--count", "3")
    msgs = [json.loads(line) for line in out.decode().splitlines()]
    assert len(msgs) == 3
    first = msgs[0]
    assert base64.b64decode(first["bodyBase64"]) == BODY
    assert [(h["Key"], h["Value"]) for h in first["headers"]] == HEADERS + [("smss-msg-id", "py-interop-1")]
    assert msgs[1]["body"] == "second" and [(h["Key"], h["Value"]) for h in msgs[1]["headers"]][0] == ("n", "2")
    assert msgs[2]["body"] == "third" and msgs[2]["headers"] == []
    assert [m["eventId"] for m in msgs] == sorted(m["eventId"] for m in msgs)


def test_go_publishes_python_consumes(server, bins, topic):
    smssctl(bins, server.addr, "topic", "create", topic)
    args = ["pub", topic, "--id", "go-interop-1"]
    for k, v in HEADERS:
        args += ["--header", f"{k}={v}"]
    smssctl(bins, server.addr, *args, "-", stdin=BODY)
    c = smss.connect(server.addr)
    with c.subscribe(topic, "py") as s:
        m = s.get(10)
    assert m.body == BODY
    assert m.headers == HEADERS + [("smss-msg-id", "go-interop-1")]
    assert m.raw_headers[1] == ("k\u00e9y".encode(), "v\u00e4lue \u2603".encode())
