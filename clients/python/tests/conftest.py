"""Test kit: the smss binaries, reserved ports and real smss processes.

The binaries are built once per session from the repository (go build), or
taken from $SMSS_TEST_BIN / $SMSSCTL_TEST_BIN. Ports come from outside the
kernel's ephemeral range and are reserved by an flock in the directory the
Go kit (internal/smsstest/port.go) uses, so Go and Python tests running at
once never pick the same port and no outgoing connection can hold one.
"""

import fcntl
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package under test, not an installed copy
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

LISTENING = re.compile(r"smss listening.*addr=(\S+)")

_held_ports = {}


def _reservable():
    lo, hi = 49152, 65535
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    below, above = lo - 1 - 10000, 65535 - (hi + 1)
    return (10000, lo - 1) if below >= above else (hi + 1, 65535)


def free_port():
    """A loopback port, free now, outside the ephemeral range, locked for this process."""
    lo, hi = _reservable()
    d = os.path.join(tempfile.gettempdir(), "smsstest-ports")
    os.makedirs(d, exist_ok=True)
    p = random.randint(lo, hi)
    for _ in range(hi - lo + 1):
        p = lo if p >= hi else p + 1
        if p in _held_ports:
            continue
        f = open(os.path.join(d, str(p)), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            f.close()
            continue
        finally:
            s.close()
        _held_ports[p] = f
        return p
    raise RuntimeError(f"no free port in {lo}..{hi}")


@pytest.fixture(scope="session")
def bins(tmp_path_factory):
    """{"smss": path, "smssctl": path}."""
    out = {}
    d = tmp_path_factory.mktemp("bin")
    for name, env in (("smss", "SMSS_TEST_BIN"), ("smssctl", "SMSSCTL_TEST_BIN")):
        if os.environ.get(env):
            out[name] = os.environ[env]
            continue
        path = str(d / name)
        r = subprocess.run(["go", "build", "-o", path, f"./cmd/{name}"], cwd=REPO, capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail(f"go build ./cmd/{name}: {r.stdout}{r.stderr}")
        out[name] = path
    return out


class Server:
    """One smss process on a reserved port, with its data under dir."""

    def __init__(self, bin_path, dir, extra="", tls_port=None, args=()):
        self.bin = bin_path
        self.args = list(args)
        self.dir = str(dir)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.tls_port = tls_port
        self.tls_addr = f"127.0.0.1:{tls_port}" if tls_port else None
        cfg = (f"host: 127.0.0.1\nport: {self.port}\nlog:\n  path: stdout\n  sample: 0\n"
               f"store:\n  path: {os.path.join(self.dir, 'data')}\n{extra}")
        self.config = os.path.join(self.dir, "config.yaml")
        with open(self.config, "w") as f:
            f.write(cfg)
        self.proc = None
        self.log = []

    def start(self, timeout=30):
        self.log = []
        self.proc = subprocess.Popen([self.bin, "-config", self.config] + self.args, cwd=self.dir, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace")
        ready = threading.Event()

        def pump(proc=self.proc, log=self.log):
            for line in proc.stdout:
                log.append(line)
                if LISTENING.search(line) and (not self.tls_port or f"{self.tls_port}" in "".join(log)):
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("smss did not start:\n" + "".join(self.log))
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def server(bins, tmp_path_factory):
    s = Server(bins["smss"], tmp_path_factory.mktemp("smss")).start()
    yield s
    s.stop()


@pytest.fixture
def start_server(bins, tmp_path):
    """start_server(extra_yaml="") -> a started Server of its own, stopped at the end of the test."""
    started = []

    def start(extra="", tls_port=None, args=()):
        s = Server(bins["smss"], tmp_path / f"s{len(started)}", extra, tls_port, args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


_topic_seq = [0]


@pytest.fixture
def topic(request):
    """A fresh topic name per test."""
    _topic_seq[0] += 1
    return f"py{_topic_seq[0]}_{request.node.name[:40]}".replace("[", "_").replace("]", "_").replace("-", "_")


def wait_for(cond, timeout=10.0, what="condition"):
    """Poll cond until it returns a truthy value, failing after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
