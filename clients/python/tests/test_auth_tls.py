"""SCRAM-SHA-256 login and TLS against a real smss."""

import os
import subprocess

import pytest

import smss
from conftest import free_port
from smss._scram import ScramClient


def test_scram_rfc7677_vector():
    sc = ScramClient("user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert sc.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = sc.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    sc.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(smss.AuthFailed):
        sc.verify(b"v=" + b"A" * 43 + b"=")
    with pytest.raises(smss.AuthFailed):  # a server nonce that does not extend ours
        ScramClient("user", "pencil", nonce="abc").final(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


def add_user(bins, users, name, password, *grants):
    r = subprocess.run([bins["smssctl"], "user", "add", name, "--users-file", users, "--iterations", "4096",
                        "--password-stdin", *grants], input=(password + "\n").encode(), capture_output=True)
    assert r.returncode == 0, r.stderr.decode()


@pytest.fixture
def auth_server(bins, start_server, tmp_path):
    users = str(tmp_path / "users.yaml")
    add_user(bins, users, "alice", "secret-a", "--roles", "admin")
    add_user(bins, users, "bob", "secret-b", "--publish", "bob.*", "--manage", "bob.*")
    return start_server(f"auth:\n  enabled: true\n  usersFile: {users}\n")


def test_login_and_permissions(auth_server):
    c = smss.connect(auth_server.addr, user="alice", password="secret-a")
    c.create_topic("t_auth")
    c.publish("t_auth", b"x")
    with c.subscribe("t_auth", "w") as s:
        assert s.get(5).body == b"x"
    b = smss.connect(auth_server.addr, user="bob", password="secret-b")
    b.create_topic("bob.1")
    b.publish("bob.1", b"ok")
    with pytest.raises(smss.PermissionDenied) as ei:
        b.publish("t_auth", b"no")
    assert "bob" in ei.value.message
    b.publish("bob.1", b"still usable")


def test_login_refusals(auth_server, start_server):
    with pytest.raises(smss.AuthFailed) as ei:
        smss.connect(auth_server.addr, user="alice", password="wrong")
    assert ei.value.message == "authentication failed"
    with pytest.raises(smss.AuthFailed):
        smss.connect(auth_server.addr, user="nobody", password="x")
    anon = smss.connect(auth_server.addr)  # alive (17) needs no login
    with pytest.raises(smss.AuthFailed) as ei:  # anything else does
        anon.topics()
    assert ei.value.message == "authentication required"
    plain = start_server()
    with pytest.raises(smss.AuthUnsupported):
        smss.connect(plain.addr, user="alice", password="secret-a")
    with pytest.raises(smss.InvalidInput):
        smss.Client(plain.addr, user="alice")


def make_cert(d):
    key, crt = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=smss-test",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], capture_output=True)
    if r.returncode != 0:
        pytest.skip("openssl cannot make a test certificate: " + r.stderr.decode())
    return key, crt


def test_tls_with_auth(bins, start_server, tmp_path):
    key, crt = make_cert(str(tmp_path))
    users = str(tmp_path / "users.yaml")
    add_user(bins, users, "alice", "secret-a", "--roles", "admin")
    tls_port = free_port()
    s = start_server(f"auth:\n  enabled: true\n  usersFile: {users}\n"
                     f"tls:\n  listen: 127.0.0.1:{tls_port}\n  cert: {crt}\n  key: {key}\n", tls_port=tls_port)
    c = smss.connect(s.tls_addr, tls=True, ca=crt, user="alice", password="secret-a")
    c.create_topic("tls1")
    c.publish("tls1", b"over tls", {"h": "1"})
    with c.subscribe("tls1", "w") as sub:
        m = sub.get(5)
    assert m.body == b"over tls" and m.header("h") == "1"
    assert c.status()["role"] == "master"
    # The certificate is checked: without its CA the handshake fails.
    with pytest.raises(smss.NetworkError) as ei:
        smss.connect(s.tls_addr, tls=True, user="alice", password="secret-a")
    assert "certificate" in str(ei.value).lower() or "TLS" in str(ei.value)
    # A plain client on the TLS port gets no reply it can read.
    with pytest.raises(smss.SmssError):
        smss.connect(s.tls_addr, user="alice", password="secret-a", timeout=3)
