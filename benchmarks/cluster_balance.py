"""How evenly one crawl loads the masters of a Redis Cluster (issue #15: the busiest
master's CPU at most 1.5 times the mean, with 3 masters).

Starts a 6-node cluster (3 masters, 3 replicas; tests/redis_cluster.py) and the
benchmark site, runs 2 ``scrapy runspider bench_spider.py`` workers of ours against
it (``redis+cluster://``), and reads each master's CPU (``INFO cpu``, user + sys)
and commands (``INFO commandstats``) before and after. Prints per master its CPU
seconds and calls, and the busiest master's CPU over the mean, for each
SCHEDULER_SHARDS given (default: 16, the cluster default, and 1, one slot).
``--items``: the spider yields an item per page, stored by RedisPipeline (its list
sits on one master); the busiest master's share of the commands is printed too.
Usage::

    .venv/bin/python benchmarks/cluster_balance.py [--pages 5000] [--shards 16 1] [--runs 3]
    .venv/bin/python benchmarks/cluster_balance.py --pages 3000 --shards 16 --items
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from _util import HERE, Site

sys.path.insert(0, str(HERE.parent / "tests"))
from redis_cluster import RedisClusterNodes  # the tests' cluster, started here


def master_readings(nodes: RedisClusterNodes) -> dict[int, tuple[float, int]]:
    """Per master port: CPU seconds (user + sys) and commands processed so far."""
    readings = {}
    for node in nodes.masters():
        with redis.Redis(port=node.port) as client:
            cpu = client.info("cpu")
            stats = client.info("stats")
        seconds = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        readings[node.port] = (seconds, int(stats["total_commands_processed"]))
    return readings


def command_counts(nodes: RedisClusterNodes) -> dict[str, int]:
    """Calls per command, summed over the masters (INFO commandstats)."""
    counts: dict[str, int] = {}
    for node in nodes.masters():
        with redis.Redis(port=node.port) as client:
            for name, stat in client.info("commandstats").items():
                counts[name] = counts.get(name, 0) + int(stat["calls"])
    return counts


def start_workers(
    url: str, site: Site, shards: int, workdir: Path, *extra: str
) -> list[subprocess.Popen[bytes]]:
    """2 ``scrapy runspider bench_spider.py`` workers of ours on the cluster ``url``, each
    reporting to ``workdir/w<n>.json`` (``extra``: more ``NAME=VALUE`` settings)."""
    procs = []
    for n in (1, 2):
        command = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "bench_spider.py")]
        command += ["-a", f"start_url={site.start_url}", "-a", f"report={workdir / f'w{n}.json'}"]
        if any(setting.startswith("ITEM_PIPELINES=") for setting in extra):
            command += ["-a", "items=1"]
        for setting in (
            "SCHEDULER=scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS=scrapy_redis.dupefilter.RFPDupeFilter",
            f"REDIS_URL={url}",
            f"SCHEDULER_SHARDS={shards}",
            "SCHEDULER_PERSIST=True",
            *extra,
        ):
            command += ["-s", setting]
        log = (workdir / f"w{n}.log").open("wb")
        procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
    return procs


#: ``--items``: what makes the workers yield and store an item per page.
ITEMS = ("ITEM_PIPELINES=" + json.dumps({"scrapy_redis.pipelines.RedisPipeline": 300}),)


def run_crawl(
    nodes: RedisClusterNodes, site: Site, shards: int, workdir: Path, items: bool = False
) -> dict[str, Any]:
    nodes.flush()
    site.reset()
    before, commands_before = master_readings(nodes), command_counts(nodes)
    idle = ("MAX_IDLE_TIME_BEFORE_CLOSE=2", "SCHEDULER_IDLE_BEFORE_CLOSE=2")
    procs = start_workers(nodes.url, site, shards, workdir, *idle, *(ITEMS if items else ()))
    started = time.monotonic()
    for proc in procs:
        proc.wait(600)
    elapsed = time.monotonic() - started
    after, commands = master_readings(nodes), command_counts(nodes)
    cpu = {port: after[port][0] - before[port][0] for port in after}
    commands = {name: calls - commands_before.get(name, 0) for name, calls in commands.items()}
    top = dict(sorted(commands.items(), key=lambda pair: -pair[1])[:8])
    calls = {port: after[port][1] - before[port][1] for port in after}
    mean = statistics.mean(cpu.values())
    return {
        "shards": shards,
        "pages": site.hits(),
        "seconds": round(elapsed, 1),
        "cpu": {str(port): round(value, 2) for port, value in sorted(cpu.items())},
        "calls": {str(port): value for port, value in sorted(calls.items())},
        "busiest_over_mean": round(max(cpu.values()) / mean, 3) if mean else None,
        "busiest_share_of_commands": round(max(calls.values()) / max(1, sum(calls.values())), 3),
        "commands_per_page": round(sum(calls.values()) / max(1, site.hits()), 2),
        "top_commands": top,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--shards", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--items", action="store_true", help="an item per page, stored")
    args = parser.parse_args()
    nodes = RedisClusterNodes().start()
    site = Site(args.pages)
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.runs):
                for shards in args.shards:  # interleaved
                    result = run_crawl(nodes, site, shards, Path(tmp), args.items)
                    print(json.dumps(result), flush=True)
                    results.append(result)
    finally:
        site.stop()
        nodes.cleanup()
    for shards in args.shards:
        ratios = [r["busiest_over_mean"] for r in results if r["shards"] == shards]
        rates = [r["pages"] / r["seconds"] for r in results if r["shards"] == shards]
        shares = [r["busiest_share_of_commands"] for r in results if r["shards"] == shards]
        print(
            f"SCHEDULER_SHARDS={shards}: busiest master CPU / mean {statistics.median(ratios)} "
            f"({min(ratios)}–{max(ratios)}), {statistics.median(rates):.0f} pages/s, busiest "
            f"master's share of the commands {statistics.median(shares):.0%}"
        )


if __name__ == "__main__":
    main()
