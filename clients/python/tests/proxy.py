"""A TCP proxy for tests that can cut a connection after forwarding a request."""

import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:port to target. cut_replies = n drops the next n
    connections' first server->client bytes: the server got and handled the
    request, the client sees the connection close without a reply."""

    def __init__(self, target, port):
        self.target = target
        self.cut_replies = 0
        self.lock = threading.Lock()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", port))
        self.ls.listen(64)
        self.addr = f"127.0.0.1:{port}"
        self.conns = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            host, port = self.target.rsplit(":", 1)
            try:
                u = socket.create_connection((host, int(port)))
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += 1
                cut = self.cut_replies > 0
                if cut:
                    self.cut_replies -= 1
            threading.Thread(target=self._pipe, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, cut), daemon=True).start()

    def _pipe(self, src, dst, cut):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if cut:
                    break
                dst.sendall(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.ls.close()
