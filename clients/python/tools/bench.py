"""Publish throughput of the Python client: T threads sharing one Client.

    python3 clients/python/tools/bench.py --addr 127.0.0.1:12301 --threads 16 --duration 10 --size 128

Each thread publishes one message per request (with a message id, the
default) as fast as the server answers; each thread holds its own pooled
connection. Prints messages/s and the request latency percentiles.
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import smss  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--topic", default="pybench")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--records", type=int, default=1, help="messages per request")
    ap.add_argument("--no-ids", action="store_true")
    a = ap.parse_args()
    c = smss.connect(a.addr, message_ids=not a.no_ids, max_idle=max(16, a.threads))
    try:
        c.create_topic(a.topic)
    except smss.TopicExist:
        pass
    body = os.urandom(a.size // 2).hex().encode()[:a.size].ljust(a.size, b"x")
    lat = [[] for _ in range(a.threads)]
    stop = time.monotonic() + a.duration
    start = threading.Barrier(a.threads + 1)

    def run(i):
        mine = lat[i]
        batch = [body] * a.records
        start.wait()
        while True:
            t0 = time.monotonic()
            if t0 >= stop:
                return
            if a.records == 1:
                c.publish(a.topic, body)
            else:
                c.publish_batch(a.topic, batch)
            mine.append(time.monotonic() - t0)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(a.threads)]
    for t in ts:
        t.start()
    t0 = time.monotonic()
    start.wait()
    for t in ts:
        t.join()
    el = time.monotonic() - t0
    all_lat = sorted(x for l in lat for x in l)
    n = len(all_lat) * a.records

    def pct(p):
        return all_lat[min(len(all_lat) - 1, int(p * len(all_lat)))] * 1e3

    print(f"threads={a.threads} size={a.size} records={a.records} ids={not a.no_ids} "
          f"msgs={n} elapsed={el:.1f}s rate={n / el:,.0f} msg/s "
          f"p50={pct(0.5):.2f}ms p99={pct(0.99):.2f}ms")
    c.close()


if __name__ == "__main__":
    main()
