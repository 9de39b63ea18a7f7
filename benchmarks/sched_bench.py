"""Scheduler micro-benchmark for ONE package and ONE queue class, in its own interpreter.

run.py starts it with our interpreter (``PYTHONPATH=src``) or with the original
package's virtualenv, so it only uses what both packages offer: the scheduler is
built the way Scrapy's engine builds it (``get_crawler`` +
``Scheduler.from_crawler`` + ``open(spider)``), then timed through
``enqueue_request`` / ``next_request``:

1. enqueue ``n`` new requests (each one goes through the dupefilter); the server's
   CPU time and its time in scripts during it are read too (``INFO``);
2. Redis memory of what is stored: ``MEMORY USAGE`` (``SAMPLES 0``) of the queue
   key(s) and of the dupefilter set, and the ``INFO memory used_memory`` delta;
3. dequeue them all (``next_request`` until it returns None);
4. on a flushed database and a new scheduler, enqueue ``n`` requests of which
   half are duplicates of earlier ones (new Request objects with the same URL).

Options for the cost of leases (our package only):

* ``--unleased``: ``SCHEDULER_QUEUE_CLASS = unleased_queues.Unleased<queue>``
  (benchmarks/unleased_queues.py: pop() overridden, so the scheduler leases nothing);
* ``--skip-dup``: no phase 4;
* ``--paired`` (what run.py uses): ours with leases and ours without, side by
  side in this one process, so that the load of the shared machine falls on
  both alike. Two schedulers, each built as above, on their own queue and
  dupefilter keys (``bench:requests:leased`` / ``bench:requests:unleased``...),
  timed in alternating blocks of ``--block`` requests (which one goes first
  alternates too), wall and CPU time summed per scheduler:

  1. enqueue ``n`` new requests into each;
  2. dequeue + ack, the first half: a stand-in engine is attached
     (``crawler.engine._slot.inprogress``, an empty set), so that, as in a
     crawl, each ``next_request`` finds the request handed out before done and
     acknowledges its lease (one ack script per pop with leases);
  3. dequeue, pop only, the second half: no engine, as in phase 3 above, so
     leases are recorded and never acknowledged.

  Without leases phases 2 and 3 run the same code.

The requests, the scheduler's construction, the timing and the Redis readings
are in sched_workload.py; ``uses_leases`` in the JSON is read from the
``scheduler/leases/leased`` stat. Prints one JSON object. Usage::

    python sched_bench.py --redis-url redis://127.0.0.1:PORT/0 --queue FifoQueue --n 10000
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import redis
import scrapy
from sched_workload import (
    EXTRA_SETTINGS,
    StandInEngine,
    build,
    class_path,
    dequeue_all,
    dequeue_some,
    enqueue_all,
    lease_count,
    leased_entries,
    make_request,
    memory_usage,
    origin,
    timed,
    uses_leases,
)


def stored_memory(server: Any, scheduler: Any, used_before: int, n: int) -> dict[str, Any]:
    """Phase 2: what the ``n`` queued requests and their fingerprints take in Redis."""
    used_after = int(server.info("memory")["used_memory"])
    df_key = scheduler.df.key.encode()
    keys = list(server.scan_iter(count=1000))
    queue_keys = [k for k in keys if k != df_key and not k.endswith(b":workers")]
    return {
        "queue_bytes_per_request": memory_usage(server, queue_keys) / n,
        "df_bytes_per_fingerprint": memory_usage(server, [df_key]) / n,
        "used_memory_per_request": (used_after - used_before) / n,
        "queue_keys": sorted(k.decode() for k in queue_keys),
    }


def duplicates_phase(
    server: Any, redis_url: str, queue: str, n: int, unleased: bool
) -> tuple[dict[str, float], int]:
    """Phase 4, on a flushed database and a new scheduler: ``n`` requests, every second
    one a new Request with the URL of an earlier one; (rate and CPU, how many were new)."""
    server.flushall()
    scheduler, spider = build(redis_url, queue, unleased)
    half = n // 2
    uniques = [make_request(spider, 10 * n + k) for k in range(half)]
    again = [make_request(spider, 10 * n + k // 2) for k in range(half)]  # already seen
    mixed = [r for pair in zip(uniques, again, strict=True) for r in pair]
    accepted, wall, cpu = timed(enqueue_all, scheduler, mixed)
    scheduler.close("finished")
    rates = {"dup_enqueue_rate": len(mixed) / wall, "dup_enqueue_cpu_us": cpu / len(mixed) * 1e6}
    return rates, accepted


def redis_time(server: Any) -> tuple[float, float, dict[str, tuple[int, int]]]:
    """The server's CPU seconds (user + sys: scripts, commands, networking), the
    seconds spent in scripts (``INFO commandstats``: EVALSHA and EVAL), and per command
    its calls and µs so far (a script's time includes the commands it calls)."""
    cpu = server.info("cpu")
    commands = server.info("commandstats")
    usec = sum(commands.get(f"cmdstat_{name}", {}).get("usec", 0) for name in ("evalsha", "eval"))
    each = {k.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for k, v in commands.items()}
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), usec / 1e6, each


def per_request(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], n: int
) -> dict[str, tuple[float, float]]:
    """Per command called in between (INFO itself left out): calls and µs per request."""
    spent = {}
    for name, (calls, usec) in after.items():
        calls_before, usec_before = before.get(name, (0, 0))
        if calls > calls_before and name != "info":
            spent[name] = ((calls - calls_before) / n, (usec - usec_before) / n)
    return spent


def run(
    redis_url: str, queue: str, n: int, unleased: bool = False, skip_dup: bool = False
) -> dict[str, Any]:
    """Phases 1 to 4 (see the module docstring) for one package and queue class."""
    server = redis.Redis.from_url(redis_url)
    server.flushall()
    scheduler, spider = build(redis_url, queue, unleased)
    requests = [make_request(spider, i) for i in range(n)]
    used_before = int(server.info("memory")["used_memory"])
    redis_before = redis_time(server)
    accepted, enq_wall, enq_cpu = timed(enqueue_all, scheduler, requests)
    redis_after = redis_time(server)
    memory = stored_memory(server, scheduler, used_before, n)
    dequeued, deq_wall, deq_cpu = timed(dequeue_all, scheduler)
    leases_left = lease_count(server)  # before close() gives them back
    scheduler.close("finished")
    half = n // 2
    dup, dup_accepted = (
        ({}, half) if skip_dup else duplicates_phase(server, redis_url, queue, n, unleased)
    )
    server.flushall()
    checks = {"accepted": accepted, "dequeued": dequeued}
    checks |= {"dup_accepted": dup_accepted, "dup_expected": half}
    return {
        **origin(),
        "scrapy": scrapy.__version__,
        "redis_py": redis.__version__,
        "queue": queue,
        "queue_class": class_path(scheduler.queue),
        "uses_leases": uses_leases(spider.crawler),
        "leases_left_after_dequeue": leases_left,
        "n": n,
        "enqueue_rate": n / enq_wall,
        "enqueue_cpu_us": enq_cpu / n * 1e6,
        "enqueue_redis_cpu_us": (redis_after[0] - redis_before[0]) / n * 1e6,
        "enqueue_script_us": (redis_after[1] - redis_before[1]) / n * 1e6,
        "enqueue_commands": per_request(redis_before[2], redis_after[2], n),
        "dequeue_rate": dequeued / deq_wall if deq_wall else 0.0,
        "dequeue_cpu_us": deq_cpu / max(dequeued, 1) * 1e6,
        **dup,
        **memory,
        "checks": checks,
        "ok": accepted == n and dequeued == n and dup_accepted == half,
    }


#: The two variants of ``--paired``: (name, unleased, suffix of their keys).
PAIRED = (("ours", False, ":leased"), ("ours-unleased", True, ":unleased"))
#: The timed phases of ``--paired`` and the prefix of their fields in the JSON.
PAIRED_PHASES = (("enqueue", "enqueue"), ("ack", "dequeue_ack"), ("noack", "dequeue_noack"))


class Paired:
    """Ours with leases and ours without, built side by side, timed in alternating blocks."""

    def __init__(self, redis_url: str, queue: str, n: int) -> None:
        built = {name: build(redis_url, queue, unleased, sfx) for name, unleased, sfx in PAIRED}
        self.scheds = {name: sched for name, (sched, _) in built.items()}
        self.requests = {
            name: [make_request(spider, i) for i in range(n)] for name, (_, spider) in built.items()
        }
        #: {name: {phase: [requests, wall s, CPU s]}}
        self.totals = {
            name: {phase: [0, 0.0, 0.0] for phase, _ in PAIRED_PHASES} for name in self.scheds
        }
        self.acked0: dict[str, int] = {}

    def alternate(self, phase: str, starts: range, op: Any) -> None:
        """Run ``op`` on blocks of ``starts.step`` requests, the two variants taking turns
        (which one goes first alternates too); sum the time each spent."""
        names = [name for name, _, _ in PAIRED]
        for index, start in enumerate(starts):
            for name in names if index % 2 == 0 else names[::-1]:
                count = min(starts.step, starts.stop - start)
                done, wall, cpu = timed(op, self.scheds[name], name, start, count, collect=False)
                total = self.totals[name][phase]
                total[0] += done
                total[1] += wall
                total[2] += cpu

    def enqueue_block(self, sched: Any, name: str, start: int, count: int) -> int:
        return enqueue_all(sched, self.requests[name][start : start + count])

    @staticmethod
    def dequeue_block(sched: Any, name: str, start: int, count: int) -> int:
        return dequeue_some(sched, count)

    def attach_engines(self) -> None:
        """A stand-in engine for each: every request handed out before is done."""
        for name, sched in self.scheds.items():
            sched.crawler.engine = StandInEngine()
            self.acked0[name] = sched.crawler.stats.get_value("scheduler/leases/acked", 0)

    def detach_engines(self) -> None:
        for sched in self.scheds.values():
            sched.crawler.engine = None

    def variant(self, name: str, server: Any, n: int) -> dict[str, Any]:
        """The JSON of one variant, checked: its queue must be empty now."""
        sched, t = self.scheds[name], self.totals[name]
        left = sched.next_request()  # untimed
        result: dict[str, Any] = {"queue_class": class_path(sched.queue)}
        result["uses_leases"] = uses_leases(sched.crawler)
        for phase, prefix in PAIRED_PHASES:
            result[f"{prefix}_rate"] = t[phase][0] / t[phase][1]
            result[f"{prefix}_cpu_us"] = t[phase][2] / max(t[phase][0], 1) * 1e6
        acked = sched.crawler.stats.get_value("scheduler/leases/acked", 0) - self.acked0[name]
        done = {"enqueued": t["enqueue"][0], "dequeued_ack": t["ack"][0]}
        checks = {**done, "dequeued_noack": t["noack"][0], "left": left is not None}
        ok = t["enqueue"][0] == n and t["ack"][0] + t["noack"][0] == n and left is None
        return result | {
            "acked": acked,
            "leases_left": leased_entries(server, f"{sched.queue.key}:leases"),
            "checks": checks,
            "ok": ok,
        }


def run_paired(redis_url: str, queue: str, n: int, block: int) -> dict[str, Any]:
    """Ours with leases and without, interleaved in blocks (see the module docstring)."""
    server = redis.Redis.from_url(redis_url)
    server.flushall()
    pair = Paired(redis_url, queue, n)
    half = n // 2
    pair.alternate("enqueue", range(0, n, block), pair.enqueue_block)
    pair.attach_engines()
    pair.alternate("ack", range(0, half, block), pair.dequeue_block)
    pair.detach_engines()
    pair.alternate("noack", range(half, n, block), pair.dequeue_block)
    variants = {name: pair.variant(name, server, n) for name in pair.scheds}
    for sched in pair.scheds.values():
        sched.close("finished")
    server.flushall()
    return {
        **origin(),
        "queue": queue,
        "n": n,
        "block": block,
        "variants": variants,
        "ok": all(v["ok"] for v in variants.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument(
        "--queue", required=True, choices=["FifoQueue", "LifoQueue", "PriorityQueue"]
    )
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument(
        "--unleased",
        action="store_true",
        help="ours only: unleased_queues.Unleased<queue> (no leases)",
    )
    parser.add_argument("--skip-dup", action="store_true", help="no 50%%-duplicates phase")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="ours with and without leases, interleaved (cost of leases)",
    )
    parser.add_argument(
        "--block", type=int, default=200, help="--paired: requests per timed block (default 200)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of every scheduler (e.g. DUPEFILTER_CLASS); repeatable",
    )
    args = parser.parse_args()
    EXTRA_SETTINGS.update(pair.split("=", 1) for pair in args.set)
    if args.paired:
        print(json.dumps(run_paired(args.redis_url, args.queue, args.n, args.block)))
    else:
        print(
            json.dumps(
                run(
                    args.redis_url,
                    args.queue,
                    args.n,
                    unleased=args.unleased,
                    skip_dup=args.skip_dup,
                )
            )
        )


if __name__ == "__main__":
    main()
