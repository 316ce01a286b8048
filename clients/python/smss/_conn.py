"""One connection to one server: TCP or TLS, logged in when credentials are set."""

import select
import socket
import ssl
import time

from . import _wire as w
from ._scram import MECHANISM, ScramClient
from .errors import (AuthUnsupported, NetworkError, NotSupported, ProtocolError, ServerError, SmssError,
                     Timeout)


def split_addr(addr):
    if not isinstance(addr, str) or not addr:
        raise w.InvalidInput(f"address {addr!r}: want host:port")
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise w.InvalidInput(f"address {addr!r}: want host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def net_error(e, what):
    """Wrap an OSError of the socket in the package's exception."""
    if isinstance(e, SmssError):
        return e
    if isinstance(e, (socket.timeout, TimeoutError)):
        return Timeout(f"{what}: timed out")
    return NetworkError(f"{what}: {e}")


class Conn:
    def __init__(self, addr, opts, timeout):
        self.addr = addr
        self.broken = False
        self.last_used = time.monotonic()
        host, port = split_addr(addr)
        deadline = time.monotonic() + timeout
        try:
            s = socket.create_connection((host, port), timeout=min(timeout, opts.connect_timeout))
        except OSError as e:
            err = net_error(e, f"connect {addr}")
            err.not_sent = True
            raise err from e
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if opts.ssl_context is not None:
                s.settimeout(max(deadline - time.monotonic(), 0.001))
                s = opts.ssl_context.wrap_socket(s, server_hostname=opts.server_name or host)
        except (OSError, ssl.SSLError) as e:
            s.close()
            err = net_error(e, f"TLS handshake with {addr}")
            err.not_sent = True
            raise err from e
        self.sock = s
        if opts.user is not None:
            try:
                self._login(opts.user, opts.password, deadline)
            except BaseException:
                self.close()
                raise

    def _login(self, user, password, deadline):
        sc = ScramClient(user, password)
        try:
            first = self.roundtrip(
                w.request(w.CMD_AUTH_START, MECHANISM.encode(), b"", _len_area(sc.first()), sc.first()),
                True, deadline - time.monotonic())
        except (NotSupported, ServerError) as e:
            if isinstance(e, NotSupported) or e.message == "authentication is not enabled on this server":
                raise AuthUnsupported(
                    f"login at {self.addr}: the server does not offer authentication ({e.message}); "
                    "refusing to continue without it") from e
            raise
        final = sc.final(first)
        last = self.roundtrip(w.request(w.CMD_AUTH_CONTINUE, b"", b"", _len_area(final), final), True,
                              deadline - time.monotonic())
        sc.verify(last)

    def roundtrip(self, req, with_body, timeout, topic=""):
        """Send req, read its reply. A network or protocol failure breaks the connection."""
        if timeout <= 0:
            self.broken = True
            raise Timeout(f"request to {self.addr}: timed out")
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(req)
            body = w.read_reply(self.sock, with_body, topic)
        except ServerError:
            self.last_used = time.monotonic()
            raise
        except ProtocolError:
            self.broken = True
            raise
        except (OSError, ssl.SSLError) as e:
            self.broken = True
            raise net_error(e, f"request to {self.addr}") from e
        self.last_used = time.monotonic()
        return body

    def looks_alive(self):
        """An idle connection must have nothing to read: readable means closed (or out of step)."""
        if self.broken:
            return False
        try:
            if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
                return False
            r, _, _ = select.select([self.sock], [], [], 0)
            return not r
        except (OSError, ValueError):
            return False

    def close(self):
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass


def _len_area(body):
    return len(body).to_bytes(4, "little")
