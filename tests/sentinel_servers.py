"""A Redis Sentinel deployment for tests: a master, one replica and three sentinels, all
``redis-server`` processes started here on free loopback ports.

The sentinels agree on a failure with a quorum of 2 and are tuned to fail over fast:
the master is down after 1 s without a reply, a failover may take 3 s before another
is tried. Never touches a server it did not start itself.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from redis_server import RedisServer, free_port
from tls_servers import Certificates, TLSRedisServer

MASTER_NAME = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
QUORUM = 2


def sentinel_binary() -> list[str]:
    """``redis-sentinel`` (Debian's redis-sentinel package), else ``redis-server --sentinel``
    (the same program)."""
    for name, extra in [("redis-sentinel", []), ("redis-server", ["--sentinel"])]:
        binary = shutil.which(name)
        if binary is not None:
            return [binary, *extra]
    raise RuntimeError("redis-server is not installed (apt-get install redis-sentinel)")


class SentinelProcess:
    """One sentinel on a free loopback port, with its own (rewritable) config file."""

    def __init__(
        self, directory: Path, master_port: int, certs: Certificates | None = None
    ) -> None:
        self.port = free_port()
        self.config = directory / f"sentinel-{self.port}.conf"
        self.client_options = tls_client_options(certs)
        self.config.write_text(
            f"{listen_config(self.port, certs)}bind 127.0.0.1\ndir {directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SentinelProcess:
        command = sentinel_binary()
        self.process = subprocess.Popen(
            [command[0], str(self.config), *command[1:]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=1, **self.client_options)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


def listen_config(port: int, certs: Certificates | None) -> str:
    """sentinel.conf lines: listen on ``port``, in plain text or (with ``certs``) TLS only,
    and reach the master and replicas over TLS too."""
    if certs is None:
        return f"port {port}\n"
    return (
        f"port 0\ntls-port {port}\ntls-replication yes\ntls-auth-clients no\n"
        f"tls-cert-file {certs.server_cert}\ntls-key-file {certs.server_key}\n"
        f"tls-ca-cert-file {certs.ca}\n"
    )


def tls_client_options(certs: Certificates | None) -> dict[str, object]:
    return {} if certs is None else {"ssl": True, "ssl_ca_certs": str(certs.ca)}


class SentinelDeployment:
    """A master, a replica of it and three sentinels monitoring it as ``mymaster``; with
    ``certs``, every one of them speaks only TLS (replication included)."""

    def __init__(self, certs: Certificates | None = None) -> None:
        self.certs = certs
        self.master = self._server()
        self.replica = self._server()
        self.client_options = tls_client_options(certs)
        self.sentinels: list[SentinelProcess] = []

    def _server(self) -> RedisServer:
        # A replica syncs at once (Redis waits 5 s by default for more replicas to share
        # the transfer): the deployment is ready, and a replica back after a failover, sooner.
        if self.certs is None:
            return RedisServer("--repl-diskless-sync-delay", "0")
        server = TLSRedisServer(self.certs)
        server.extra_args += ["--tls-replication", "yes", "--repl-diskless-sync-delay", "0"]
        return server

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", sentinel.port) for sentinel in self.sentinels]

    def url(self, db: int = 0, scheme: str = "redis+sentinel") -> str:
        hosts = ",".join(f"{host}:{port}" for host, port in self.addresses)
        return f"{scheme}://{hosts}/{MASTER_NAME}/{db}"

    def start(self, timeout: float = 30) -> SentinelDeployment:
        self.master.start()
        self.replica.extra_args += ["--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica.start()
        self.sentinels = [
            SentinelProcess(self.master.dir, self.master.port, self.certs).start() for _ in range(3)
        ]
        self._wait(self._ready, timeout, "the sentinels did not see the replica and each other")
        return self

    def master_port(self) -> int | None:
        """The master's port according to the first sentinel that answers."""
        for sentinel in self.sentinels:
            try:
                with sentinel.client() as client:
                    _host, port = client.sentinel_get_master_addr_by_name(MASTER_NAME)
                return int(port)
            except (redis.ConnectionError, redis.TimeoutError, TypeError):
                continue
        return None

    def master_client(self) -> redis.Redis:
        """A plain client of the current master (for checks, not through the sentinels)."""
        port = self.master_port()
        assert port is not None, "no sentinel knows the master"
        return redis.Redis(port=port, **self.client_options)

    def kill_master(self) -> None:
        """``kill -9`` the master: no shutdown, no last write to the replica."""
        assert self.master.process is not None
        self.master.process.kill()
        self.master.process.wait()

    def wait_failover(self, timeout: float = 30) -> float:
        """Seconds until every sentinel names the replica as the master."""
        began = time.monotonic()
        self._wait(self._promoted, timeout, "the sentinels did not promote the replica")
        return time.monotonic() - began

    def _ready(self) -> bool:
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                state = client.sentinel_master(MASTER_NAME)
            if state["num-slaves"] < 1 or state["num-other-sentinels"] < len(self.sentinels) - 1:
                return False
        with redis.Redis(port=self.replica.port, **self.client_options) as replica:
            return replica.info("replication").get("master_link_status") == "up"

    def _promoted(self) -> bool:
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                _host, port = client.sentinel_get_master_addr_by_name(MASTER_NAME)
            if int(port) != self.replica.port:
                return False
        with redis.Redis(port=self.replica.port, **self.client_options) as replica:
            return replica.info("replication")["role"] == "master"

    @staticmethod
    def _wait(condition, timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{message} in {timeout}s"
            time.sleep(0.1)

    def cleanup(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        self.replica.cleanup()
        self.master.cleanup()
