"""A networked Redis Cluster: the same crawl with and without 1 ms added per round trip
(issue #15: with +1 ms, at least 0.9 times the crawl without it, on the cluster too).

Starts a 6-node cluster whose nodes tell clients to use a proxy in front of each
(``cluster-announce-port``; redis_proxy.py, restarted on the same ports with
``--delay-ms 0`` or ``--delay-ms 0.5`` each way), and the benchmark site; runs 2
``scrapy runspider bench_spider.py`` workers of ours (``redis+cluster://`` the
proxies) with each SCHEDULER_SHARDS given, interleaved, ``--runs`` times. Prints
per lane count and delay the median (min–max) pages/s of the crawl phase and the
round trips per page (all proxies together). With ``--original``, 2 workers of the
original scrapy-redis 0.9.1 (benchmarks/.venv-original, made on first use) crawl
too, interleaved with ours, as its users run it on a cluster: ``redis_cls`` =
``RedisCluster`` in ``REDIS_PARAMS`` and the queue and fingerprints under one hash
tag (a crawl of theirs needs both), its FifoQueue (its default queue fails there). Usage::

    .venv/bin/python benchmarks/cluster_latency.py [--pages 2000] [--runs 3] [--shards 16 1]
        [--original]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _util import HERE, Site, free_port
from original_venv import clean_env, original_python

sys.path.insert(0, str(HERE.parent / "tests"))
from cluster_balance import start_workers

from redis_cluster import RedisClusterNodes  # the tests' cluster, started here


class Proxies:
    """redis_proxy.py in front of every node, on fixed ports (the ports announced)."""

    def __init__(self, ports: dict[int, int], workdir: Path) -> None:
        self.ports, self.workdir = ports, workdir  # node port -> proxy port
        self.procs: list[subprocess.Popen[str]] = []
        self.by_command: Counter[str] = Counter()

    def start(self, delay_ms: float) -> None:
        for node, port in self.ports.items():
            command = [sys.executable, str(HERE / "redis_proxy.py"), "--target-port", str(node)]
            command += ["--port", str(port), "--delay-ms", str(delay_ms)]
            command += ["--stats-file", str(self.workdir / f"proxy-{port}.json")]
            proc = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )  # (its shutdown on SIGTERM is noisy)
            assert proc.stdout is not None
            proc.stdout.readline()  # READY <port>
            self.procs.append(proc)

    def stop(self) -> int:
        """Stop them; the round trips they counted (their commands, by name, are added to
        :attr:`by_command`)."""
        trips = 0
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        for port in self.ports.values():
            stats = self.workdir / f"proxy-{port}.json"
            if stats.exists():
                counted = json.loads(stats.read_text())
                trips += counted["round_trips"]
                self.by_command.update(counted["by_command"])
                stats.unlink()
        self.procs = []
        return trips


@contextlib.contextmanager
def proxied_cluster(workdir: Path) -> Iterator[tuple[RedisClusterNodes, Proxies, str]]:
    """A 6-node cluster whose nodes tell clients to use a proxy in front of each (the
    proxies stopped: start them with the delay wanted), and its ``redis+cluster://`` URL."""
    proxy_ports = [free_port() for _ in range(6)]
    nodes = RedisClusterNodes(announced=proxy_ports)
    ports = dict(zip([node.port for node in nodes.nodes], proxy_ports, strict=True))
    proxies = Proxies(ports, workdir)
    try:
        proxies.start(0.0)  # the cluster is made through them: its nodes name them
        nodes.start()
        proxies.stop()
        yield nodes, proxies, "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in proxy_ports)
    finally:
        proxies.stop()
        nodes.cleanup()


#: The original on a cluster: a cluster client, and its crawl's keys under one hash tag.
ORIGINAL_SETTINGS = (
    'REDIS_PARAMS={"redis_cls": "redis.cluster.RedisCluster"}',
    "SCHEDULER_QUEUE_KEY={%(spider)s}:requests",
    "SCHEDULER_DUPEFILTER_KEY={%(spider)s}:dupefilter",
    # Its default PriorityQueue pops with MULTI in a pipeline, which redis-py's cluster
    # pipeline refuses ("method multi() is not supported outside of transactional
    # context"): its FIFO queue (LPUSH, RPOP) is what works there.
    "SCHEDULER_QUEUE_CLASS=scrapy_redis.queue.FifoQueue",
)


def start_original_workers(
    python: Path, node_url: str, site: Site, workdir: Path
) -> list[subprocess.Popen[bytes]]:
    """2 workers of the original (``python``), on the cluster of node ``node_url``."""
    procs = []
    for n in (1, 2):
        command = [str(python), "-m", "scrapy", "runspider", str(HERE / "bench_spider.py")]
        command += ["-a", f"start_url={site.start_url}", "-a", f"report={workdir / f'w{n}.json'}"]
        for setting in (
            "SCHEDULER=scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
            f"REDIS_URL={node_url}",
            "SCHEDULER_PERSIST=True",
            *ORIGINAL_SETTINGS,
        ):
            command += ["-s", setting]
        log = (workdir / f"w{n}.log").open("wb")
        procs.append(
            subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
        )
    return procs


def crawl(url: str, site: Site, shards: int, workdir: Path, original: Path | None = None) -> float:
    """One crawl by 2 workers (ours, or the original's with ``original``, its
    interpreter); pages/s from the first to the last response."""
    site.reset()
    if original is not None:
        node_url = "redis://" + url.removeprefix("redis+cluster://").split(",")[0]
        procs = start_original_workers(original, node_url, site, workdir)
    else:
        procs = start_workers(url, site, shards, workdir)
    for proc in procs:
        proc.wait(900)
    infos = [json.loads((workdir / f"w{n}.json").read_text()) for n in (1, 2)]
    opened = min(info["opened_at"] for info in infos)
    last = max(info["last_response"] or info["opened_at"] for info in infos)
    return site.hits() / (last - opened)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shards", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--delay-ms", type=float, default=0.5, help="each way")
    parser.add_argument(
        "--by-command", action="store_true", help="also print each crawl's commands per page"
    )
    parser.add_argument(
        "--original", action="store_true", help="also the original's workers (hash-tagged keys)"
    )
    args = parser.parse_args()
    original = original_python() if args.original else None
    #: What crawls: our lane counts, and "original" (its workers).
    variants: list[int | str] = [*args.shards, *(["original"] if original else [])]
    rates: dict[tuple[int | str, float], list[float]] = {}
    trips: dict[tuple[int | str, float], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, proxied_cluster(Path(tmp)) as cluster:
        nodes, proxies, url = cluster
        site = Site(args.pages)
        try:
            for _ in range(args.runs):
                for shards in variants:
                    for delay in (0.0, args.delay_ms):
                        nodes.flush()
                        proxies.by_command.clear()
                        proxies.start(delay)
                        time.sleep(0.2)
                        if shards == "original":
                            rate = crawl(url, site, 1, Path(tmp), original)
                        else:
                            rate = crawl(url, site, int(shards), Path(tmp))
                        per_page = proxies.stop() / max(1, site.hits())
                        rates.setdefault((shards, delay), []).append(rate)
                        trips.setdefault((shards, delay), []).append(per_page)
                        print(json.dumps({"shards": shards, "delay_ms": 2 * delay,
                                          "pages_per_s": round(rate), "round_trips_per_page":
                                          round(per_page, 2)}), flush=True)  # fmt: skip
                        if args.by_command:
                            pages = max(1, site.hits())
                            commands = {
                                name: round(count / pages, 3)
                                for name, count in proxies.by_command.most_common(12)
                            }
                            print(json.dumps({"commands_per_page": commands}), flush=True)
        finally:
            site.stop()
    report(rates, trips, args.delay_ms)


def report(rates: dict[Any, list[float]], trips: dict[Any, list[float]], delay: float) -> None:
    print("\n| SCHEDULER_SHARDS | added per round trip | pages/s | round trips/page |")
    print("|---|---|---|---|")
    for (shards, added), values in rates.items():
        spread = f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"
        per_page = statistics.median(trips[(shards, added)])
        print(f"| {shards} | {2 * added:g} ms | {spread} | {per_page:.2f} |")
    ours = sorted({key[0] for key in rates if key[0] != "original"}, reverse=True)
    for shards in ours:
        slow, fast = rates[(shards, delay)], rates[(shards, 0.0)]
        paired = [a / b for a, b in zip(slow, fast, strict=True)]
        print(
            f"SCHEDULER_SHARDS={shards}: with +{2 * delay:g} ms / without "
            f"{statistics.median(slow) / statistics.median(fast):.2f}x (target >= 0.9); paired "
            f"{statistics.median(paired):.2f} ({min(paired):.2f}–{max(paired):.2f})"
        )
    if ("original", delay) in rates:
        theirs = statistics.median(rates[("original", delay)])
        for shards in ours:
            mine = statistics.median(rates[(shards, delay)])
            print(
                f"SCHEDULER_SHARDS={shards} with +{2 * delay:g} ms: {mine / theirs:.1f}x the "
                "original's rate (hash-tagged keys, same delay; target >= 5)"
            )


if __name__ == "__main__":
    main()
