"""A real Redis Cluster for tests: 6 ``redis-server`` nodes (3 masters, 3 replicas) on free
loopback ports, joined with ``redis-cli --cluster create``.

Never touches a server it did not start itself.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import redis
from redis.crc import key_slot

from redis_server import RedisServer, free_port, in_ci

#: Seconds a node may be unreachable before the cluster fails it over: short, so that
#: failover tests take seconds (Redis's default is 15).
NODE_TIMEOUT_MS = 1000


class RedisClusterNodes:
    """``masters`` masters with one replica each, on free ports of 127.0.0.1."""

    def __init__(
        self, masters: int = 3, announced: list[int] | None = None, extra_args: tuple = ()
    ) -> None:
        """``announced``: per node, the port its clients are told to use (a proxy's, that
        passes the traffic on to it: benchmarks/cluster_latency.py); its own otherwise.
        ``extra_args``: more redis-server arguments for every node."""
        ports = [_cluster_port() for _ in range(2 * masters)]
        #: Node port -> the port the cluster tells clients (CLUSTER SHARDS, MOVED).
        self.announced = dict(zip(ports, announced or ports, strict=True))
        self.nodes = [
            RedisServer(
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--cluster-config-file",
                "nodes.conf",
                # a replica that lost its master for a while may still take over
                "--cluster-replica-validity-factor",
                "0",
                # a node back from kill -9 syncs with its new master at once (Redis waits
                # 5 s by default for more replicas to share the transfer: 5 s a revive)
                "--repl-diskless-sync-delay",
                "0",
                *_announce(port, announced[n] if announced else None),
                *extra_args,
                port=port,
            )
            for n, port in enumerate(ports)
        ]

    @property
    def url(self) -> str:
        """The URL scrapy-redis takes for a cluster, naming every node."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redis+cluster://{hosts}"

    def start(self, timeout: float = 30) -> RedisClusterNodes:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed (apt-get install redis-tools)")
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        self.wait_ok(timeout)
        return self

    def wait_ok(self, timeout: float = 60) -> None:
        """Wait until every running node reports ``cluster_state:ok``, every slot is
        served by a running master, and the running nodes agree (a new cluster, or one
        after a failover or a node's return): each sees the same master or replica of
        the same master in each of them, and each replica has synced with its master.
        (A node back from kill -9 claims its old slots until the others' newer epoch
        reaches it, and replicates only after that: a test that asked it then, or WAITed
        for its replica, saw what no longer held. The bound is for a stalled machine.)"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = self.running()
            if (
                all(_state_ok(node.port) for node in running)
                and self._served()
                and self._agreed(running)
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the cluster did not reach cluster_state:ok in {timeout}s")

    def _agreed(self, running: list[RedisServer]) -> bool:
        """Whether every running node sees the same roles (see _roles()) for the running
        nodes, and every running replica's link to that master is up and synced."""
        ports = {node.port for node in running}
        try:
            views = [_roles(node.port, self.announced, ports) for node in running]
            if any(view is None or view != views[0] for view in views):
                return False
            for port, (role, master) in views[0].items():  # type: ignore[union-attr]
                if role == "slave" and _replica_link(port) != ("connected", self.announced[master]):
                    return False
        except redis.RedisError:
            return False
        return True

    def _served(self) -> bool:
        """Whether every shard's master, as the first running node sees it, is running."""
        running = {self.announced[node.port] for node in self.running()}
        if not running:
            return False
        try:
            port = min(node.port for node in self.running())
            with redis.Redis(port=port, socket_timeout=1) as client:
                shards = client.execute_command("CLUSTER SHARDS")
        except redis.RedisError:
            return False
        for shard in map(_pairs, shards):
            nodes = [_pairs(node) for node in shard["nodes"] if _pairs(node).get("port") in running]
            if shard["slots"] and not any(_text(n.get("role")) == "master" for n in nodes):
                return False
            # "loading": a replica whose offset the others have not heard of yet (0 until
            # the master's first ping, up to 10 s); _agreed() asks the replicas themselves
            if any(_text(n.get("health")) == "fail" for n in nodes):
                return False
        return True

    def running(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now."""
        return [node for node in self.running() if _role(node.port) == "master"]

    def master_of(self, key: str) -> RedisServer:
        """The running master serving ``key``'s slot now."""
        slot = key_slot(key.encode())
        for node in self.masters():
            with redis.Redis(port=node.port, socket_timeout=1) as client:
                ranges = client.execute_command("CLUSTER SHARDS")
            for shard in map(_pairs, ranges):
                slots = shard["slots"]
                mine = any(slots[i] <= slot <= slots[i + 1] for i in range(0, len(slots), 2))
                if mine and any(_pairs(n).get("port") == node.port and _text(_pairs(n).get("role"))
                                == "master" for n in shard["nodes"]):  # fmt: skip
                    return node
        raise RuntimeError(f"no running master serves the slot of {key!r}")

    def shard_of(self, master: RedisServer) -> list[RedisServer]:
        """``master`` and its replicas."""
        with redis.Redis(port=master.port, socket_timeout=1) as client:
            shards = client.execute_command("CLUSTER SHARDS")
        for shard in map(_pairs, shards):
            ports = [_pairs(node).get("port") for node in shard["nodes"]]
            if master.port in ports:
                return [node for node in self.nodes if node.port in ports]
        raise RuntimeError(f"node {master.port} is in no shard")

    def kill(self, node: RedisServer) -> None:
        """kill -9 ``node`` (its replica takes over after NODE_TIMEOUT_MS: see wait_ok())."""
        assert node.process is not None
        node.process.kill()
        node.process.wait()
        node.process = None

    def fail_over(self, master: RedisServer, timeout: float = 60) -> RedisServer:
        """``CLUSTER FAILOVER`` on a replica of ``master`` (no data lost, no node down: the
        old master becomes its replica); returns the new master once the cluster is ok."""
        replica = next(node for node in self.shard_of(master) if node.port != master.port)
        with redis.Redis(port=replica.port, socket_timeout=1) as client:
            client.execute_command("CLUSTER FAILOVER")
        deadline = time.monotonic() + timeout
        while _role(replica.port) != "master" or _role(master.port) != "slave":
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {replica.port} did not take over in {timeout}s")
            time.sleep(0.1)
        self.wait_ok(timeout)
        return replica

    def revive(self, node: RedisServer, timeout: float = 60) -> None:
        """Start a killed ``node`` again on its port and directory: it rejoins the cluster
        (as a replica of the master that took its slots)."""
        node.start()
        self.wait_ok(timeout)

    def flush(self) -> None:
        for node in self.masters():
            with redis.Redis(port=node.port) as client:
                client.flushall()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


def _announce(port: int, announced: int | None) -> list[str]:
    if announced is None:
        return []
    return ["--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", str(announced),
            "--cluster-announce-bus-port", str(port + 10000)]  # fmt: skip


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free and valid too (a bus port
    taken by another process made a node exit at start: seen in a full run)."""
    while True:
        port = free_port()
        if port + 10000 <= 65535 and _bindable(port + 10000):
            return port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _state_ok(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=1) as client:
            info = client.execute_command("CLUSTER INFO")
    except redis.RedisError:
        return False
    if not isinstance(info, dict):  # a redis-py that does not parse it
        text = info.decode() if isinstance(info, bytes) else str(info)
        info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {str(k): str(v).strip() for k, v in info.items()}
    return fields.get("cluster_state") == "ok" and fields.get("cluster_slots_ok") == "16384"


def _roles(port: int, announced: dict[int, int], ports: set[int]) -> dict | None:
    """The running nodes (``ports``) as the node at ``port`` sees them (CLUSTER NODES):
    node port -> ("master", None) or ("slave", its master's node port); None if it sees
    any of them failing, unknown or without a master."""
    node_port = {seen: own for own, seen in announced.items()}
    with redis.Redis(port=port, socket_timeout=1) as client:
        nodes = client.execute_command("CLUSTER NODES")
    by_id = {}
    for address, node in nodes.items():
        seen_port = int(address.split("@")[0].rsplit(":", 1)[1])
        by_id[node["node_id"]] = node_port.get(seen_port, seen_port)
    view: dict[int, tuple[str, int | None]] = {}
    for node in nodes.values():
        own = by_id[node["node_id"]]
        if own not in ports:
            continue
        flags = set(node["flags"].split(","))
        if flags & {"fail", "fail?", "handshake", "noaddr"} or not node["connected"]:
            return None
        if "master" in flags:
            view[own] = ("master", None)
        elif node["master_id"] in by_id:
            view[own] = ("slave", by_id[node["master_id"]])
        else:
            return None
    return view if set(view) == ports else None


def _replica_link(port: int) -> tuple[str, int]:
    """A replica's link (ROLE): its state (``connected`` once synced) and its master's
    port (as announced)."""
    with redis.Redis(port=port, socket_timeout=1) as client:
        role = client.execute_command("ROLE")
    return _text(role[3]), int(role[2])


def _role(port: int) -> str:
    with redis.Redis(port=port, socket_timeout=1) as client:
        role = client.execute_command("ROLE")[0]
    return role.decode() if isinstance(role, bytes) else str(role)


def _pairs(reply: object) -> dict:
    """A flat [name, value, ...] reply (or a dict already) as a dict with str names."""
    flat: list = [] if isinstance(reply, dict) else list(reply)  # type: ignore[call-overload]
    items = (
        list(reply.items()) if isinstance(reply, dict) else zip(flat[::2], flat[1::2], strict=True)
    )
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in items}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def running(nodes: RedisClusterNodes) -> Iterator[RedisClusterNodes]:
    """A fixture's body: ``nodes`` started (the test skipped if they cannot start,
    except in CI, where it fails), then cleaned up."""
    import pytest

    try:
        nodes.start()
    except (RuntimeError, OSError) as exc:
        nodes.cleanup()
        if in_ci():
            raise
        pytest.skip(f"no Redis Cluster: {exc}")
    yield nodes
    nodes.cleanup()
