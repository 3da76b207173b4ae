"""TLS in tests: a throwaway CA with server and client certificates (and a
stranger's, signed by another CA), made with the openssl command line; the
settings of a daemon's TLS listener; redis-py over TLS to it."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import redis
from harness import HOST


@dataclasses.dataclass(frozen=True)
class Pki:
    """Paths of PEM files: a CA, the daemon's certificate (SAN IP:127.0.0.1),
    a client certificate it signed, and a second CA with a client of its own
    (a certificate the daemon must not trust)."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    stranger_cert: str
    stranger_key: str


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(directory: str, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN=leaseq test {name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)


def _make_leaf(directory: str, name: str, ca: str, extensions: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=leaseq test {name}", cwd=directory)
    with open(os.path.join(directory, f"{name}.ext"), "w") as f:
        f.write(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=directory)


def make_pki(directory) -> Pki:
    """Certificates for TLS tests, made with the openssl command line (the
    cryptography package is not a test dependency); valid for two days."""
    d = str(directory)
    leaf = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
    _make_ca(d, "ca")
    _make_ca(d, "other-ca")
    _make_leaf(d, "server", "ca", leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    _make_leaf(d, "client", "ca", leaf + "extendedKeyUsage=clientAuth\n")
    _make_leaf(d, "stranger", "other-ca", leaf + "extendedKeyUsage=clientAuth\n")
    p = lambda name: os.path.join(d, name)    # noqa: E731
    return Pki(ca=p("ca.crt"), server_cert=p("server.crt"), server_key=p("server.key"),
               client_cert=p("client.crt"), client_key=p("client.key"),
               stranger_cert=p("stranger.crt"), stranger_key=p("stranger.key"))


def tls_env(pki: Pki, tls_port: int, auth_clients: str = "yes", **more: str) -> dict:
    """LEASEQ_* variables for a daemon with a TLS listener on ``tls_port``."""
    return {"LEASEQ_TLS_PORT": str(tls_port), "LEASEQ_TLS_CERT_FILE": pki.server_cert,
            "LEASEQ_TLS_KEY_FILE": pki.server_key, "LEASEQ_TLS_CA_CERT_FILE": pki.ca,
            "LEASEQ_TLS_AUTH_CLIENTS": auth_clients, **more}


def tls_client(pki: Pki, tls_port: int, cert: str | None = "client", **kw) -> redis.Redis:
    """redis-py over TLS to the daemon, verifying its certificate;
    ``cert``: which client certificate to present ("client", "stranger", or
    None for none)."""
    if cert is not None:
        kw.update(ssl_certfile=getattr(pki, f"{cert}_cert"), ssl_keyfile=getattr(pki, f"{cert}_key"))
    kw.setdefault("socket_timeout", 30)
    return redis.Redis(host=HOST, port=tls_port, ssl=True, ssl_ca_certs=pki.ca, ssl_cert_reqs="required", **kw)
