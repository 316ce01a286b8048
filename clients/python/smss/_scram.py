"""SCRAM-SHA-256 client (RFC 5802, RFC 7677) on hashlib and hmac."""

import base64
import hashlib
import hmac
import os

from .errors import AuthFailed, ProtocolError

MECHANISM = "SCRAM-SHA-256"


def _b64(b):
    return base64.b64encode(b).decode("ascii")


def _saslname(user):
    # RFC 5802 §5.1: "=" and "," are sent as "=3D" and "=2C".
    return user.replace("=", "=3D").replace(",", "=2C")


def _hmac(key, msg):
    return hmac.new(key, msg, hashlib.sha256).digest()


def _attrs(msg):
    out = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ProtocolError(f"SCRAM: malformed attribute {part!r}")
        out.setdefault(part[0], part[2:])
    return out


class ScramClient:
    """One handshake: first() -> final(server_first) -> verify(server_final)."""

    def __init__(self, user, password, nonce=None):
        if not user:
            raise ValueError("SCRAM: empty user name")
        self.user = user
        self.password = password.encode("utf-8") if isinstance(password, str) else bytes(password)
        self.nonce = nonce or _b64(os.urandom(18)).replace("=", "")
        self.first_bare = f"n={_saslname(user)},r={self.nonce}"
        self._server_sig = None

    def first(self):
        return ("n,," + self.first_bare).encode("utf-8")

    def final(self, server_first):
        sf = server_first.decode("utf-8")
        a = _attrs(sf)
        if "e" in a:
            raise AuthFailed(f"authentication failed: {a['e']}")
        try:
            rnonce, salt, iters = a["r"], base64.b64decode(a["s"], validate=True), int(a["i"])
        except (KeyError, ValueError) as e:
            raise ProtocolError(f"SCRAM: bad server-first-message: {e}") from None
        if not rnonce.startswith(self.nonce) or len(rnonce) == len(self.nonce):
            raise AuthFailed("authentication failed: the server's nonce does not extend ours")
        if iters < 1 or iters > 10_000_000:
            raise ProtocolError(f"SCRAM: iteration count {iters} out of range")
        salted = hashlib.pbkdf2_hmac("sha256", self.password, salt, iters)
        client_key = _hmac(salted, b"Client Key")
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={rnonce}"
        auth_message = f"{self.first_bare},{sf},{without_proof}".encode("utf-8")
        sig = _hmac(stored_key, auth_message)
        proof = bytes(x ^ y for x, y in zip(client_key, sig))
        self._server_sig = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode("utf-8")

    def verify(self, server_final):
        a = _attrs(server_final.decode("utf-8"))
        if "e" in a:
            raise AuthFailed(f"authentication failed: {a['e']}")
        try:
            v = base64.b64decode(a["v"], validate=True)
        except (KeyError, ValueError) as e:
            raise ProtocolError(f"SCRAM: bad server-final-message: {e}") from None
        if not hmac.compare_digest(v, self._server_sig):
            raise AuthFailed("authentication failed: the server did not prove it holds the credentials")
