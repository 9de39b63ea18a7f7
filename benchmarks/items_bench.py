"""RedisPipeline: items stored per second, Redis local and 1 ms away, two checkouts side by side.

    nice python benchmarks/items_bench.py --before /tmp/before/src        # ~2 min
    nice python benchmarks/items_bench.py --before /tmp/before/src --rounds 5 --n 20000

Each run is a child interpreter (``PYTHONPATH`` = the checkout's ``src``) with a
running Twisted reactor (the asyncio one, as ``scrapy crawl`` installs it) and a
``RedisPipeline.from_crawler()``. Items arrive as Scrapy hands them over: ten per
"response", a response every reactor turn, each item's ``process_item()`` answer
awaited in an asyncio task as Scrapy does (an item given back at once counts as
stored), at most ``--in-flight`` items not stored yet (the scraper's responses
waiting; ``CONCURRENT_ITEMS`` per response). Measured until the last item is
stored: items/s (wall), client CPU per item, Redis commands per item (``INFO``:
client calls, not those a script runs) and, with ``--proxy``, round trips per item.
"1 ms away" is redis_proxy.py ``--delay-ms 0.5`` (each way). Variants and
latencies alternate round after round; prints medians (min–max). Nothing asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import ROOT, Redis, log, summary
from crawls import Proxy

PER_RESPONSE = 10


def run_child(url: str, n: int, in_flight: int) -> dict[str, Any]:
    """In the child: push ``n`` items through a pipeline under a running reactor."""
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    import asyncio
    import time

    import redis
    from scrapy import Spider
    from scrapy.utils.test import get_crawler
    from twisted.internet import reactor

    from scrapy_redis.pipelines import RedisPipeline

    class ItemsSpider(Spider):
        name = "itemsbench"

    crawler = get_crawler(ItemsSpider, {"REDIS_URL": url, "LOG_LEVEL": "WARNING"})
    crawler.spider = crawler.spidercls.from_crawler(crawler)
    pipe = RedisPipeline.from_crawler(crawler)
    server = redis.Redis.from_url(url)
    server.delete("itemsbench:items")
    server.ping()
    pipe.server.ping()  # connected before the clock starts
    state = {"made": 0, "stored": 0, "waiting": 0}
    tasks: set[Any] = set()  # referenced until done
    result: dict[str, Any] = {}
    commands = int(server.info("stats")["total_commands_processed"])

    async def one(item: dict[str, Any]) -> None:
        answer = pipe.process_item(item, crawler.spider)
        if asyncio.iscoroutine(answer):
            await answer
        state["stored"] += 1
        state["waiting"] -= 1

    def produce() -> None:
        if state["stored"] >= n:
            finish()
            return
        if state["made"] < n and state["waiting"] + PER_RESPONSE <= in_flight:
            for _ in range(min(PER_RESPONSE, n - state["made"])):
                item = {"n": state["made"], "url": f"https://example.com/p/{state['made']}"}
                state["made"] += 1
                state["waiting"] += 1
                task = asyncio.ensure_future(one(item))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        reactor.callLater(0, produce)

    def finish() -> None:
        result["wall"] = time.perf_counter() - start[0]
        result["cpu"] = time.process_time() - start[1]
        reactor.stop()

    start = [time.perf_counter(), time.process_time()]
    reactor.callLater(0, produce)
    reactor.run()
    stored = server.llen("itemsbench:items")
    after = int(server.info("stats")["total_commands_processed"])
    return {
        "items": n,
        "stored": stored,
        "items_per_s": n / result["wall"],
        "cpu_us_per_item": result["cpu"] / n * 1e6,
        "redis_commands_per_item": (after - commands - 2) / n,
    }


def run(src: str, url: str, n: int, in_flight: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(Path(__file__).parent)])}
    command = [sys.executable, __file__, "--child-url", url, "--n", str(n)]
    command += ["--in-flight", str(in_flight)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=False, help="src/ of the checkout to compare")
    parser.add_argument("--after", default=str(ROOT / "src"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=10_000, help="items per run")
    parser.add_argument("--in-flight", type=int, default=1_000)
    parser.add_argument("--child-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_url:
        print(json.dumps(run_child(args.child_url, args.n, args.in_flight)))
        return
    variants = {"after": args.after, **({"before": args.before} if args.before else {})}
    redis = Redis()
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    log(f"load average at start: {os.getloadavg()}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rnd in range(args.rounds):
                for delay in (0.0, 0.5):
                    proxy = Proxy(redis, Path(tmp) / f"proxy-{rnd}-{delay}.json", delay)
                    order = list(variants.items())
                    for name, src in order if rnd % 2 == 0 else reversed(order):
                        found = run(src, proxy.url, args.n, args.in_flight)
                        where = "local" if delay == 0 else "1 ms away"
                        results.setdefault((name, where), []).append(found)
                        log(f"{name} {where}: {found}")
                    proxy.stop(args.n)
    finally:
        redis.stop()
    log(f"load average at end: {os.getloadavg()}")
    report(results, args)


def report(results: dict[tuple[str, str], list[dict[str, Any]]], args: Any) -> None:
    print(f"\n# RedisPipeline, {args.n} items a run, {args.rounds} rounds, median (min–max)\n")
    print("| variant | Redis | items/s | client CPU µs/item | Redis commands/item |")
    print("|---|---|---|---|---|")
    for (name, where), runs in sorted(results.items()):
        cells = []
        for field, fmt in (
            ("items_per_s", "{:,.0f}"),
            ("cpu_us_per_item", "{:.1f}"),
            ("redis_commands_per_item", "{:.3f}"),
        ):
            s = summary([r[field] for r in runs])
            cells.append(
                f"{fmt.format(s['median'])} ({fmt.format(s['min'])}–{fmt.format(s['max'])})"
            )
        print(f"| {name} | {where} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
