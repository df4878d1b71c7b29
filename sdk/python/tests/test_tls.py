"""The client over TLS: a daemon serving a leaf signed by a private CA
(made with the openssl tool, as docs/security.md does), and mutual TLS
with a client certificate signed by the same CA."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agentsessions import Client, Unavailable

from .conftest import Daemon

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl tool")


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(cwd: Path, name: str, ext: str) -> None:
    """A key and a v3 leaf for it, signed by ca.pem."""
    _openssl(cwd, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr")
    (cwd / f"{name}.ext").write_text(ext)
    _openssl(cwd, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")


@pytest.fixture()
def pki(tmp_path: Path) -> Path:
    _openssl(tmp_path, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", "ca.key", "-out", "ca.pem")
    _leaf(tmp_path, "server", "basicConstraints = critical, CA:FALSE\n"
          "keyUsage = critical, digitalSignature, keyEncipherment\n"
          "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost\n")
    _leaf(tmp_path, "client", "basicConstraints = critical, CA:FALSE\n"
          "keyUsage = critical, digitalSignature, keyEncipherment\n"
          "extendedKeyUsage = clientAuth\n")
    return tmp_path


def test_a_turn_over_tls_verifies_the_server_against_the_ca(pki: Path) -> None:
    d = Daemon(pki, extra=["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")])
    try:
        with Client(d.addr, tls_ca=str(pki / "ca.pem")) as c:
            s = c.create(harness="echo")
            assert c.exec(s.uid, "over tls").output == "echo:over tls"
        # Without the CA the server is not trusted, and nothing is sent.
        with Client(d.addr, tls_ca=str(pki / "client.pem")) as c:
            with pytest.raises(Unavailable):
                c.get(s.uid)
    finally:
        d.stop()


def test_mutual_tls_needs_a_client_certificate(pki: Path) -> None:
    d = Daemon(pki, extra=["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
                           "--tls-client-ca", str(pki / "ca.pem")])
    try:
        with Client(d.addr, tls_ca=str(pki / "ca.pem"), tls_cert=str(pki / "client.pem"),
                    tls_key=str(pki / "client.key")) as c:
            s = c.create(harness="echo")
            assert c.get(s.uid).uid == s.uid
        with Client(d.addr, tls_ca=str(pki / "ca.pem")) as c:
            with pytest.raises(Unavailable):
                c.create(harness="echo")
    finally:
        d.stop()
