#!/usr/bin/env python3
"""Replicated-cost benchmark (BENCHMARKS.md, "Replicated: the cluster and
read-committed delivery"): three smss nodes on loopback, measured with
smss-bench against the master, alternating the two setups round by round
so that the machine's drift hits both alike.

  cluster   three `-role auto` nodes (replication.syncSlaves 1)
  manual    `-role master` + two `-role slave`, replication.syncSlaves 1
  manual2   the same with syncSlaves 2: every write waits for both slaves,
            as a cluster's in-sync rule makes it wait for every in-sync
            member (the same durability as the cluster)

A cluster is measured once both slaves are in sync and eligible (its full
durability). Workloads: 64-connection publish (msgs/s, master CPU us/msg,
the CPU of all three nodes per message) on each setup; the
idle CPU of every node of each setup over --idle seconds; publish->delivery
latency at 1,000 msg/s through the master with syncSlaves 1, read-committed
on against the opt-out (replication.readCommitted false), one slave.

Usage: python3 scripts/bench-replicated.py [--rounds 3] [--duration 10s]
       [--idle 20] [--keep] [--no-read-committed]
(--no-read-committed: only the cluster against the manual setups.)
It builds smss, smss-bench and smssctl into a temp dir, starts and stops
every server itself, and prints one JSON line per measurement and a summary.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime + stime


def build(tmp):
    bins = {}
    for name in ("smss", "smss-bench", "smssctl"):
        out = os.path.join(tmp, name)
        subprocess.run(["go", "build", "-o", out, "./cmd/" + name], cwd=ROOT, check=True)
        bins[name] = out
    return bins


def config(dirpath, port, extra):
    with open(os.path.join(dirpath, "config.yaml"), "w") as f:
        f.write(f"host: 127.0.0.1\nport: {port}\nlog:\n  path: {dirpath}/log\n  sample: 0\n"
                f"store:\n  path: {dirpath}/data\n{extra}")


def status(bins, addr):
    r = subprocess.run([bins["smssctl"], "--addr", addr, "--json", "status"], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def wait(cond, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v is not None and v is not False:
            return v
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what}")


class Setup:
    def __init__(self, bins, tmp, kind, extra=""):
        self.bins, self.kind, self.procs, self.addrs = bins, kind, [], []
        self.dir = tempfile.mkdtemp(prefix=kind + "-", dir=tmp)
        ports = [free_port() for _ in range(3)]
        rafts = [free_port() for _ in range(3)]
        self.addrs = [f"127.0.0.1:{p}" for p in ports]
        ids = "abc"
        need = 2 if kind == "manual2" else 1
        repl = f"replication:\n  syncSlaves: {need}\n  syncTimeoutMs: 5000\n  onSyncTimeout: fail\n" + extra
        for i in range(3):
            d = os.path.join(self.dir, ids[i])
            os.makedirs(d)
            if kind == "cluster":
                peers = "".join(f"    {ids[j]}: {{raft: \"127.0.0.1:{rafts[j]}\", addr: \"{self.addrs[j]}\"}}\n" for j in range(3))
                config(d, ports[i], repl + f"cluster:\n  node: {ids[i]}\n  peers:\n{peers}")
                args = ["-role", "auto"]
            else:
                config(d, ports[i], repl if i == 0 else "")
                args = ["-role", "master"] if i == 0 else ["-role", "slave", "-host", "127.0.0.1", "-port", str(ports[0]), "-event", "0"]
            self.procs.append(subprocess.Popen([bins["smss"], "-config", os.path.join(d, "config.yaml")] + args,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.master = wait(self.find_master, f"a {kind} master accepting writes")

    def find_master(self):
        for i, a in enumerate(self.addrs):
            st = status(self.bins, a)
            if not st or st.get("role") != "master":
                continue
            if self.kind == "cluster" and not self.full_isr(a):
                continue
            # A write must go through: the slaves confirm.
            r = subprocess.run([self.bins["smssctl"], "--addr", a, "topic", "create", "warm"], capture_output=True, text=True)
            if r.returncode == 0 or "exist" in r.stderr:
                return i
        return None

    def full_isr(self, addr):
        # Measured at the cluster's full durability: both slaves in sync and
        # eligible, as with manual syncSlaves 2.
        r = subprocess.run([self.bins["smssctl"], "--addr", addr, "--json", "cluster", "status"],
                           capture_output=True, text=True, timeout=10)
        try:
            nodes = json.loads(r.stdout)["nodes"]
        except (ValueError, KeyError, TypeError):
            return False
        return all(n.get("master") or (n.get("inSync") and n.get("eligible")) for n in nodes)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def bench(bins, args):
    r = subprocess.run([bins["smss-bench"]] + args + ["--json", "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"smss-bench {' '.join(args)}: {r.stderr}")
    out = json.loads(r.stdout)
    return out[0] if isinstance(out, list) else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--idle", type=float, default=20)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-read-committed", action="store_true",
                    help="measure only the cluster against the manual setups (skip the read-committed runs)")
    o = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-replicated-")
    bins = build(tmp)
    pub = {"cluster": [], "manual": [], "manual2": []}
    idle = {"cluster": [], "manual": [], "manual2": []}
    lat = {"on": [], "off": []}
    rcpub = {"on": [], "off": []}
    for rnd in range(o.rounds):
        order = ["cluster", "manual", "manual2"] if rnd % 2 == 0 else ["manual2", "manual", "cluster"]
        for kind in order:
            s = Setup(bins, tmp, kind)
            try:
                # Idle first: nothing but heartbeats, probes and alives.
                pids = [p.pid for p in s.procs]
                before = [cpu_seconds(p) for p in pids]
                time.sleep(o.idle)  # the measured interval itself
                used = sum(cpu_seconds(p) - b for p, b in zip(pids, before))
                idle[kind].append(100 * used / o.idle)
                mpid = s.procs[s.master].pid
                before = [cpu_seconds(p) for p in pids]
                res = bench(bins, ["pub", "--addr", s.addrs[s.master], "--pid", str(mpid), "--conns", "64",
                                   "--duration", o.duration, "--topic", f"pub{rnd}"])
                # Every node's CPU over the run (the slaves' share included)
                # per message published.
                used = sum(cpu_seconds(p) - b for p, b in zip(pids, before))
                res["nodes_cpu_us_per_msg"] = 1e6 * used / max(res["messages"], 1)
                pub[kind].append(res)
                print(json.dumps({"round": rnd, "setup": kind, "msgs_per_sec": res["msgs_per_sec"],
                                  "master_cpu": res.get("server_cpu"), "nodes_cpu_us_per_msg": res["nodes_cpu_us_per_msg"],
                                  "idle_cpu_percent_all_nodes": idle[kind][-1]}), flush=True)
            finally:
                s.stop()
        for mode in ([] if o.no_read_committed else ["on", "off"] if rnd % 2 == 0 else ["off", "on"]):
            extra = "" if mode == "on" else "  readCommitted: false\n"
            s = Setup(bins, tmp, "manual", extra)
            try:
                res = bench(bins, ["e2e", "--addr", s.addrs[s.master], "--rate", "1000", "--duration", o.duration,
                                   "--topic", f"e2e{rnd}"])
                lat[mode].append(res)
                thr = bench(bins, ["pub", "--addr", s.addrs[s.master], "--pid", str(s.procs[s.master].pid), "--conns", "64",
                                   "--duration", o.duration, "--topic", f"rcpub{rnd}"])
                rcpub[mode].append(thr["msgs_per_sec"])
                print(json.dumps({"round": rnd, "readCommitted": mode, "latency": res.get("latency"),
                                  "publish_64conns_msgs_per_sec": thr["msgs_per_sec"]}), flush=True)
            finally:
                s.stop()

    def med(xs):
        return statistics.median(xs) if xs else float("nan")

    c = [r["msgs_per_sec"] for r in pub["cluster"]]
    m = [r["msgs_per_sec"] for r in pub["manual"]]
    m2 = [r["msgs_per_sec"] for r in pub["manual2"]]
    cpu = {k: med([r["server_cpu"]["us_per_msg"] for r in pub[k] if r.get("server_cpu")]) for k in pub}
    nodes_cpu = {k: med([r["nodes_cpu_us_per_msg"] for r in pub[k]]) for k in pub}
    summary = {
        "publish_64conns_msgs_per_sec": {"cluster": med(c), "manual": med(m), "manual2": med(m2),
                                         "cluster_over_manual_median_of_pairs": med([a / b for a, b in zip(c, m)]),
                                         "cluster_over_manual2_median_of_pairs": med([a / b for a, b in zip(c, m2)])},
        "master_cpu_us_per_msg": cpu,
        "all_three_nodes_cpu_us_per_msg": nodes_cpu,
        "idle_cpu_percent_of_one_core_all_three_nodes": {k: med(idle[k]) for k in idle},
    }
    if not o.no_read_committed:
        summary["read_committed_publish_64conns_msgs_per_sec"] = {mode: med(rcpub[mode]) for mode in rcpub}
        summary["e2e_1000_per_sec_us"] = {mode: {"p50": med([r["latency"]["p50_us"] for r in lat[mode]]),
                                                "p99": med([r["latency"]["p99_us"] for r in lat[mode]])} for mode in lat}
    print(json.dumps(summary, indent=1))
    if not o.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
