"""TLS for tests: a private CA, server and client certificates made with the ``openssl``
command, and a ``redis-server`` that speaks only TLS on a free loopback port."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from redis_server import RedisServer

#: Subject alternative names of the server certificate (redis-py checks the host name).
SERVER_NAMES = "subjectAltName=IP:127.0.0.1,DNS:localhost"


@dataclass(frozen=True)
class Certificates:
    """Paths of a CA certificate and of server and client key pairs signed by it."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("openssl is not installed (apt-get install openssl)")
    subprocess.run([binary, *args], check=True, capture_output=True, timeout=60)


def _signed_pair(directory: Path, name: str, ca: Path, ca_key: Path, extension: str) -> None:
    """``<name>.key`` and ``<name>.crt``, signed by the CA, with one v3 extension."""
    key, request = directory / f"{name}.key", directory / f"{name}.csr"
    extfile = directory / f"{name}.ext"
    extfile.write_text(extension + "\n")
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=scrapy-redis test {name}"),
        *("-keyout", str(key), "-out", str(request)),
    )
    _openssl(
        *("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key)),
        *("-CAcreateserial", "-days", "2", "-sha256", "-extfile", str(extfile)),
        *("-out", str(directory / f"{name}.crt")),
    )


def make_certificates(directory: Path) -> Certificates:
    """A fresh CA and a server and a client certificate signed by it, in ``directory``."""
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
        *("-subj", "/CN=scrapy-redis test CA", "-keyout", str(ca_key), "-out", str(ca)),
    )
    _signed_pair(directory, "server", ca, ca_key, SERVER_NAMES)
    _signed_pair(directory, "client", ca, ca_key, "extendedKeyUsage=clientAuth")
    return Certificates(
        ca=ca,
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
    )


def tls_server_args(certs: Certificates, port: int, client_auth: bool = False) -> list[str]:
    """redis-server options for TLS only on ``port`` (the plain port closed)."""
    return [
        *("--port", "0", "--tls-port", str(port)),
        *("--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key)),
        *("--tls-ca-cert-file", str(certs.ca)),
        *("--tls-auth-clients", "yes" if client_auth else "no"),
    ]


class TLSRedisServer(RedisServer):
    """A ``redis-server`` answering only TLS connections, on a free loopback port."""

    def __init__(self, certs: Certificates, client_auth: bool = False) -> None:
        super().__init__()
        self.certs = certs
        self.client_auth = client_auth
        self.extra_args = tls_server_args(certs, self.port, client_auth)

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def client_options(self) -> dict[str, str]:
        """What a client needs to trust the server (and to be trusted by it)."""
        options = {"ssl_ca_certs": str(self.certs.ca)}
        if self.client_auth:
            options["ssl_certfile"] = str(self.certs.client_cert)
            options["ssl_keyfile"] = str(self.certs.client_key)
        return options

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, **self.client_options())

    def _wait_ready(self, timeout: float) -> None:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5, **self.client_options())
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    raise RuntimeError(f"redis-server exited with code {self.process.returncode}")
                try:
                    client.ping()
                    return
                except (redis.ConnectionError, ssl.SSLError):
                    time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"TLS redis-server on port {self.port} did not start in {timeout}s")
