"""Fleet-wide limits per download slot (SCHEDULER_FLEET_LIMITS): what the sites see, and
what a pop costs.

1. **Sites** (``--skip-sites`` to skip): 4 workers (``scrapy runspider``
   tests/spiders/polite_spider.py), DOWNLOAD_DELAY = 0.5 without jitter, 3 sites of
   tests/polite_site.py (127.0.0.2-4): per site the rate (requests a second) and the
   smallest gap between two requests, with the setting off and on.
2. **Speed** (``--skip-speed``): pages a second of the same fleet on the 3 sites
   without delays and with CONCURRENT_REQUESTS_PER_DOMAIN = 64 (the limits do not
   bind), off and on.
3. **Fairness** (``--fairness``): a broad crawl of one site of 300 pages and 30 of 5,
   DOWNLOAD_DELAY = 0.2: the crawl's length against the ideal polite schedule (300 x
   0.2 s), and when the small sites were done, off and on.
4. **Groups** (``--group-sizes 1,2,3,4,6``, alone): Redis bytes per queued request of a
   slot's requests of one priority inline (in ``pq``) and as a list, by their number.
5. **Scale** (``--skip-scale``): the per-slot queues filled with Q requests over S
   slots (``--sizes SxQ,...``; by default 10^3 and 10^5 slots x 10^5 requests; see fill()
   for how: a bulk loader, then one request per slot through the push script), then
   the cost of one pop script call taking 8 requests under a lease (and releasing the
   previous pop's), as a worker does, in microseconds on the server (``INFO
   commandstats``) and round trip; the same for today's PriorityQueue; and Redis
   memory per queued request of each (medians of ``--runs`` interleaved runs).

    python benchmarks/politeness.py --runs 2        # ~6 min on 2 cores
    python benchmarks/politeness.py --skip-sites --skip-speed --skip-scale --fairness
    nice -n 5 python benchmarks/politeness.py --skip-sites --skip-speed --runs 1 \
        --sizes 1000x100000,100000x100000,1000x10000000,100000x10000000   # ~1 h

Prints a Markdown report on stdout. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src"), str(HERE)]

from _util import log  # noqa: E402


def sites_report(pages: int) -> list[str]:
    import redis

    from polite_site import ADDRESSES, PoliteSites
    from redis_server import RedisServer
    from test_e2e import wait_all
    from test_politeness_e2e import POLITE, fleet

    lines = [
        "| SCHEDULER_FLEET_LIMITS | site | requests | rate (/s) | min gap (s) | median gap (s) |",
        "|---|---|---|---|---|---|",
    ]
    for on in (False, True):
        server_process = RedisServer().start()
        try:
            server = redis.Redis(port=server_process.port)
            url = f"redis://127.0.0.1:{server_process.port}/0"
            tmp = Path(f"/tmp/politeness-bench-{'on' if on else 'off'}")
            tmp.mkdir(exist_ok=True)
            settings = {**POLITE, "SCHEDULER_FLEET_LIMITS": on}
            log(f"4 workers, 3 sites, fleet limits {'on' if on else 'off'}")
            import test_politeness_e2e

            test_politeness_e2e.PAGES = pages
            with PoliteSites(ADDRESSES, pages=pages) as sites:
                wait_all(fleet(server, url, tmp, settings, sites))
            for address in ADDRESSES:
                gaps = sites.gaps(address)
                lines.append(
                    f"| {on} | {address} | {len(gaps) + 1} | {sites.rate(address):.2f} | "
                    f"{min(gaps):.3f} | {statistics.median(gaps):.3f} |"
                )
        finally:
            server_process.cleanup()
    return lines


def speed_report(pages: int, runs: int) -> list[str]:
    """Pages a second of 4 workers on 3 sites without delays, CONCURRENT_REQUESTS_PER_DOMAIN
    = 64 (the fleet-wide cap does not bind), with the setting off and on, interleaved."""
    import redis

    from polite_site import ADDRESSES, PoliteSites
    from redis_server import RedisServer
    from test_e2e import wait_all
    from test_politeness_e2e import fleet

    rates: dict[bool, list[float]] = {False: [], True: []}
    for run in range(runs):
        for on in (False, True):
            process = RedisServer().start()
            try:
                server = redis.Redis(port=process.port)
                url = f"redis://127.0.0.1:{process.port}/0"
                tmp = Path(f"/tmp/politeness-speed-{run}-{on}")
                tmp.mkdir(exist_ok=True)
                settings = {"SCHEDULER_FLEET_LIMITS": on, "CONCURRENT_REQUESTS_PER_DOMAIN": 64}
                log(f"speed run {run + 1}, fleet limits {on}")
                with PoliteSites(ADDRESSES, pages=pages) as sites:
                    wait_all(fleet(server, url, tmp, settings, sites))
                times = sorted(t for address in ADDRESSES for t in sites.times(address))
                rates[on].append((len(times) - 1) / (times[-1] - times[0]))
            finally:
                process.cleanup()
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    return [
        "| SCHEDULER_FLEET_LIMITS | pages a second (median) | runs |",
        "|---|---|---|",
        f"| False | {off:.0f} | {', '.join(f'{r:.0f}' for r in rates[False])} |",
        f"| True | {on:.0f} | {', '.join(f'{r:.0f}' for r in rates[True])} |",
        "",
        f"Ratio on / off: {on / off:.2f}.",
    ]


def fairness_report(big: int, small_sites: int, small: int, delay: float) -> list[str]:
    """A broad crawl: one site of ``big`` pages and ``small_sites`` sites of ``small``
    pages, DOWNLOAD_DELAY = ``delay`` without jitter, 4 workers: the crawl's length
    against the ideal polite schedule (the big site's pages times the delay), and when
    the small sites were done, with the setting off and on."""
    import redis

    from polite_site import PoliteSites
    from redis_server import RedisServer
    from test_e2e import wait_all
    from test_politeness_e2e import NO_JITTER, fleet

    big_site = "127.0.1.1"
    smalls = [f"127.0.1.{n}" for n in range(2, small_sites + 2)]
    ideal = big * delay
    lines = [
        "| SCHEDULER_FLEET_LIMITS | crawl (s) | / ideal | small sites done at (s) | "
        "/ ideal | big site's min gap (s) |",
        "|---|---|---|---|---|---|",
    ]
    for on in (False, True):
        process = RedisServer().start()
        try:
            server = redis.Redis(port=process.port)
            url = f"redis://127.0.0.1:{process.port}/0"
            tmp = Path(f"/tmp/politeness-fair-{on}")
            tmp.mkdir(exist_ok=True)
            settings = {"SCHEDULER_FLEET_LIMITS": on, "DOWNLOAD_DELAY": delay, **NO_JITTER}
            log(f"fairness, fleet limits {on}")
            with (
                PoliteSites([big_site], pages=big) as big_sites,
                PoliteSites(smalls, pages=small) as small_sites_,
            ):
                urls = big_sites.urls + small_sites_.urls
                wait_all(fleet(server, url, tmp, settings, _Urls(urls)))
            start = min(t for t in big_sites.times(big_site))
            small_times = [t for a in smalls for t in small_sites_.times(a)]
            end = max([*big_sites.times(big_site), *small_times])
            done = max(small_times) - start
            lines.append(
                f"| {on} | {end - start:.1f} | {(end - start) / ideal:.2f} | {done:.1f} | "
                f"{done / ideal:.2f} | {min(big_sites.gaps(big_site)):.3f} |"
            )
        finally:
            process.cleanup()
    return lines


class _Urls:
    """What fleet() needs of the sites: their listing pages."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls


def fill(queue, slots: int, queued: int) -> None:
    """Queue ``queued`` requests over ``slots`` slots. The requests differ only by their
    URL, of one length, so one encoded request is the template of all. All but the last
    ``slots`` are written straight into the queue's layout by a pipelined bulk loader
    (:func:`bulk_load`: the members the push script would write, 10,000 a command); the
    last ``slots`` requests, one per slot, go through the queue's own push script, which
    places every slot (and writes today's queue's priority index)."""
    from scrapy import Request

    from scrapy_redis.queues.base import Entry

    def url(n: int) -> str:
        return f"http://site{n % slots:06d}.example/page/{n:09d}.html"

    head, tail = queue.encode(Request(url(0))).data.split(url(0).encode())
    bulk_load(queue, slots, queued - slots, lambda n: head + url(n).encode() + tail)
    batch = []
    for n in range(max(0, queued - slots), queued):
        entry = Entry(head + url(n).encode() + tail, 0)
        entry.slot = f"site{n % slots:06d}.example"
        batch.append(entry)
    queue.push_entries(batch)


def bulk_load(queue, slots: int, count: int, data) -> None:
    """Requests 0 .. ``count`` - 1 (``data(n)``: the encoded request n, of slot n % slots,
    priority 0, sequence n + 1) written in the layout of ``queue``'s push script, without
    it: for the per-slot queues (lua/_slot_store.lua), a slot with LIST_FROM requests or
    more gets its list (``RPUSH`` of ``<6 bytes sequence><request>``; its group in ``pq``
    and ``lists``; counted), the
    others' requests are members of ``pq`` (``<slot> NUL <2^47-1 - priority><sequence>
    <request>``), and the sequence counter is set; or RPUSH onto today's list of priority 0."""
    from scrapy_redis.politeness.queue import LIST_FROM, SlotQueue
    from scrapy_redis.store.keys import priority_list_key, slot_list_key

    per_slot = isinstance(queue, SlotQueue)
    server, chunk = queue.server, 10_000
    prefix = f"{(1 << 47) - 1:012x}"
    listed = count >= LIST_FROM * slots  # every slot has count // slots requests or more

    def group(n: int) -> bytes:
        return f"site{n % slots:06d}.example\0{prefix}".encode()

    for start in range(0, count, chunk):
        numbers = range(start, min(count, start + chunk))
        if per_slot and listed:
            lists: dict[bytes, list[bytes]] = {}
            for n in numbers:
                lists.setdefault(group(n), []).append((n + 1).to_bytes(6, "big") + data(n))
            pipe = server.pipeline(transaction=False)
            for name, elements in lists.items():
                pipe.rpush(slot_list_key(queue.key, name), *elements)
            pipe.execute()
        elif per_slot:
            members = {group(n) + f"{n + 1:012x}".encode() + data(n): 0 for n in numbers}
            server.zadd(queue.slot_keys[0], members)
        else:
            server.rpush(priority_list_key(queue.key, 0), *(data(n) for n in numbers))
        if start % 1_000_000 == 0 and start:
            log(f"  {start:,} loaded")
    if per_slot:
        server.set(queue.slot_keys[4], count)
        if listed and count:
            groups = {group(n): 0 for n in range(min(slots, count))}
            server.zadd(queue.slot_keys[0], groups)  # (a list's group points to it)
            server.zadd(queue.store_keys[0], groups)
            server.set(queue.store_keys[1], count - len(groups))


def pop_cost(server, queue, pops: int) -> tuple[float, float, float]:
    """(µs per pop call on the server, µs per round trip, requests taken per call) over
    ``pops`` pops of 8, each releasing the previous one's lease (as a worker does)."""
    from scrapy_redis.queues.leases import LeaseBook

    book = LeaseBook(server, queue.key, "bench", 300)
    server.config_resetstat()
    held, taken = None, 0
    started = time.perf_counter()
    for _ in range(pops):
        releases = [(held, list(range(1, held.unreleased + 1)))] if held else []
        ticket = book.ticket(releases=releases)
        entries = queue.pop_entries(8, ticket=ticket)
        held = book.taken_batch(ticket, len(entries))
        taken += len(entries)
    elapsed = time.perf_counter() - started
    stats = server.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    return float(evalsha.get("usec_per_call", 0.0)), elapsed / pops * 1e6, taken / pops


def requests_memory(server, queue) -> int:
    """The bytes of the keys holding the queued requests (sampled: 5 elements a key)."""
    from scrapy_redis.politeness.queue import SlotQueue
    from scrapy_redis.store.keys import priority_list_key, slot_list_key

    if not isinstance(queue, SlotQueue):
        return int(server.memory_usage(priority_list_key(queue.key, 0)) or 0)
    keys = [queue.slot_keys[0]]
    keys += [slot_list_key(queue.key, g) for g in server.zrange(queue.store_keys[0], 0, -1)]
    return sum(int(server.memory_usage(key) or 0) for key in keys)


def scale_report(sizes: list[tuple[int, int]], pops: int, runs: int) -> list[str]:
    import redis

    from helpers import make_spider
    from redis_server import RedisServer
    from scrapy_redis.politeness.queue import SlotQueue
    from scrapy_redis.queue import PriorityQueue

    lines = [
        "| queue | slots | queued | pop of 8, server (µs) | round trip (µs) | "
        "taken per pop | memory per queued request (bytes) | of which the requests' keys |",
        "|---|---|---|---|---|---|---|---|",
    ]
    # no delay, a cap above what one worker holds: every pop takes 8 (the cost per
    # request taken; with delays, a pop of slots that all wait returns at once)
    spider = make_spider({"DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": 1000})
    results: dict[tuple[str, int, int], list[tuple[float, ...]]] = {}
    for run in range(runs):  # interleaved: the machine's load changes over minutes
        for slots, queued in sizes:
            for kind in (SlotQueue, PriorityQueue):
                process = RedisServer().start()
                try:
                    server = redis.Redis(port=process.port)
                    queue = kind(server, spider, "bench:requests")
                    before = server.info("memory")["used_memory"]
                    log(f"run {run + 1}: {kind.__name__}, {queued} requests, {slots} slots")
                    fill(queue, slots, queued)
                    per_request = (server.info("memory")["used_memory"] - before) / queued
                    own = requests_memory(server, queue) / queued
                    server_us, trip_us, per_pop = pop_cost(server, queue, pops)
                    key = (kind.__name__, slots, queued)
                    measures = (server_us, trip_us, per_pop, per_request, own)
                    results.setdefault(key, []).append(measures)
                finally:
                    process.cleanup()
    for (name, slots, queued), measures in results.items():
        server_us, trip_us, per_pop, per_request, own = (
            statistics.median(m[i] for m in measures) for i in range(5)
        )
        label = "per slot" if name == "SlotQueue" else "PriorityQueue (today)"
        lines.append(
            f"| {label} | {slots} | {queued} | {server_us:.1f} | {trip_us:.1f} | "
            f"{per_pop:.1f} | {per_request:.0f} | {own:.0f} |"
        )
    return lines


def group_report(sizes: list[int], groups: int = 20_000) -> list[str]:
    """Bytes per request (``used_memory`` delta) of ``groups`` groups (a slot's requests
    of one priority) of k requests each, for each k of ``sizes``: inline (members of
    ``pq``) against a list per group (with its member in ``pq`` and ``lists``), written
    as the scripts write them (lua/_slot_store.lua): where lists start to pay."""
    import redis
    from scrapy import Request

    from helpers import make_spider
    from redis_server import RedisServer
    from scrapy_redis.politeness.queue import SlotQueue
    from scrapy_redis.store.keys import slot_list_key

    lines = ["| requests per group | inline (bytes per request) | list |", "|---|---|---|"]
    priority = f"{(1 << 47) - 1:012x}"
    for k in sizes:
        row = []
        for listed in (False, True):
            process = RedisServer().start()
            try:
                server = redis.Redis(port=process.port)
                queue = SlotQueue(server, make_spider({}), "bench:requests")
                data = queue.encode(Request("http://site000000.example/page/000000000.html")).data
                before = server.info("memory")["used_memory"]
                pipe, seq = server.pipeline(transaction=False), 0
                for g in range(groups):
                    group = f"site{g:06d}.example\0{priority}".encode()
                    seqs = range(seq + 1, seq + k + 1)
                    seq += k
                    if listed:
                        pipe.rpush(
                            slot_list_key(queue.key, group),
                            *(s.to_bytes(6, "big") + data for s in seqs),
                        )
                        pipe.zadd(queue.slot_keys[0], {group: 0})
                        pipe.zadd(queue.store_keys[0], {group: 0})
                    else:
                        pipe.zadd(
                            queue.slot_keys[0],
                            {group + f"{s:012x}".encode() + data: 0 for s in seqs},
                        )
                    if g % 1000 == 999:
                        pipe.execute()
                pipe.execute()
                row.append((server.info("memory")["used_memory"] - before) / (groups * k))
            finally:
                process.cleanup()
        lines.append(f"| {k} | {row[0]:.0f} | {row[1]:.0f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-sites", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument(
        "--fairness", action="store_true", help="a broad crawl: 1 site of 300 pages, 30 of 5"
    )
    parser.add_argument("--speed-pages", type=int, default=300, help="pages per site (speed)")
    parser.add_argument("--pages", type=int, default=30, help="pages per site")
    parser.add_argument(
        "--sizes",
        default="1000x100000,100000x100000",
        help="scale cases, SLOTSxQUEUED comma-separated (e.g. 1000x10000000)",
    )
    parser.add_argument(
        "--group-sizes",
        default="",
        help="only: bytes per request inline vs in lists, for groups of these sizes (1,2,3,4,6)",
    )
    parser.add_argument("--pops", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each scale case (median)")
    args = parser.parse_args()
    if args.group_sizes:
        sizes = [int(k) for k in args.group_sizes.split(",")]
        print(
            "\n".join(["## Per-slot queues: inline or a list per group", "", *group_report(sizes)])
        )
        return
    out = ["# Fleet-wide limits per download slot", ""]
    if not args.skip_sites:
        out += ["## What each site sees (4 workers, DOWNLOAD_DELAY = 0.5, no jitter)", ""]
        out += [*sites_report(args.pages), ""]
    if not args.skip_speed:
        out += ["## Speed when the limits do not bind (4 workers, 3 sites, no delay)", ""]
        out += [*speed_report(args.speed_pages, args.runs), ""]
    if args.fairness:
        out += ["## Fairness: a broad crawl (4 workers, DOWNLOAD_DELAY = 0.2)", ""]
        out += [*fairness_report(300, 30, 5, 0.2), ""]
    if args.skip_scale:
        print("\n".join(out))
        return
    out += ["## Cost of a pop of 8, memory (no delay, concurrency 1000 per slot)", ""]
    sizes = [tuple(int(n) for n in size.split("x")) for size in args.sizes.split(",")]
    out += scale_report(sizes, args.pops, args.runs)
    out += [
        "",
        f"Medians of {args.runs} interleaved runs; PriorityQueue ignores the slots (its "
        "requests are the same URLs).",
    ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
