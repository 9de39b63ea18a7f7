"""What a crawl keeps for later (issue 27.5), as ``scrapy redis status``, the dashboard and
``/metrics`` show it: the requests due later (``<queue>:due``, see scheduling/due.py) and
the fingerprints that expire (DUPEFILTER_LIFETIME, see docs/incremental.rst).

Every read is cheap whatever the size of the keys: ``ZCARD``, ``ZCOUNT`` and the first
member of the sorted sets (O(log n)); for a lean filter's generations, ``SCARD`` of at
most :data:`SAMPLE` buckets per live generation (in each of its parts), the rest
estimated from them (the
fingerprints spread evenly over the buckets). Times are the Redis server's (``now``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

from scrapy_redis.dupefilters.bloom_expiry import GENERATIONS as BLOOM_GENERATIONS
from scrapy_redis.dupefilters.lean_expiry import GENERATIONS
from scrapy_redis.dupefilters.lean_layout import layout_from_meta
from scrapy_redis.store.keys import (
    bloom_generation_key,
    due_key,
    lean_generation_key,
    lean_meta_key,
    slot_base,
)
from scrapy_redis.store.redis_values import Reader, UnreadableValueError, integer, text_of

#: Buckets of a lean generation counted at most (the others estimated from them).
SAMPLE = 64
#: The window of "expiring soon", in seconds.
SOON = 3600


def due_later(reader: Reader, queue_keys: Sequence[str], cluster: bool, now: float) -> dict:
    """The requests due later of the queues ``queue_keys`` (a crawl's lanes): how many,
    how many are due already (not moved into the queue yet), and when the next is due
    (``next_due_at``: the server's clock, POSIX seconds; ``next_due_in``: seconds from
    ``now``, 0 if due already; both None when there is none)."""
    count, due_now, first = 0, 0, math.inf
    now_ms = int(now * 1000)
    for queue_key in queue_keys:
        key = due_key(queue_key, cluster)
        zset = "sorted set"
        count += reader.zcard(key)
        due_now += reader.read(key, zset, lambda k=key: reader.server.zcount(k, "-inf", now_ms), 0)
        command = lambda k=key: reader.server.zrange(k, 0, 0, withscores=True)  # noqa: E731
        head = reader.read(key, zset, command, [])
        if head:
            first = min(first, float(head[0][1]))
    at = first / 1000 if math.isfinite(first) else None
    return {
        "count": count,
        "due_now": due_now,
        "next_due_at": at,
        "next_due_in": None if at is None else max(0.0, round(at - now, 3)),
    }


def expiring(reader: Reader, filter_keys: Sequence[str], cluster: bool, now: float) -> dict | None:
    """The fingerprints that expire in the filters ``filter_keys`` (a crawl's lanes'): for
    the set filter's sorted set, how many are alive, kept forever, expiring within
    :data:`SOON` seconds, and expired but not removed yet; for a lean filter, its live
    generations (when each expires whole, how many it holds). None: no filter with
    fingerprints that expire."""
    views = [_expiring_one(reader, key, cluster, now) for key in filter_keys]
    found = [view for view in views if view is not None]
    if not found:
        return None
    total: dict[str, Any] = {"layout": found[0]["layout"]}
    for name in ("alive", "forever", "expiring_soon", "expired"):
        total[name] = sum(view.get(name, 0) for view in found)
    total["soon_seconds"] = SOON
    if total["layout"] in ("lean", "bloom"):
        total["lifetime"] = found[0]["lifetime"]
        total["generations"] = _merged_generations(found)
    return total


def _expiring_one(reader: Reader, key: str, cluster: bool, now: float) -> dict | None:
    kind = reader.type(key)
    if kind == "zset":
        return _sorted_set(reader, key, now)
    if kind == "hash":  # a Bloom filter's meta hash: its generations, if it has a lifetime
        return bloom_generations(reader, key, cluster, now)
    return lean_generations(reader, key, cluster, now) if kind == "none" else None


def lean_generations(reader: Reader, key: str, cluster: bool, now: float) -> dict | None:
    """A lean filter's live generations (``key`` is the filter's key, which holds nothing:
    its meta hash and buckets are named from it); None if ``key`` is not a lean filter
    with fingerprints that expire."""
    meta = lean_meta_key(key, cluster)
    if reader.type(meta) != "hash":
        return None
    lifetime = reader.hget(meta, "lifetime_ms")
    if lifetime is None:  # a lean filter without fingerprints that expire
        return None
    lifetime_ms = reader.parse(lambda: integer(lifetime, meta, "lifetime_ms", low=0), 0)
    return _lean(reader, key, cluster, now, lifetime_ms) if lifetime_ms else None


def lean_size(reader: Reader, key: str, cluster: bool, now: float) -> int | None:
    """The fingerprints a lean filter with a lifetime holds: its own buckets' (its count;
    estimated from a sample of them once one was kept forever with a lifetime set, which
    the count does not follow) and its live generations' (estimated the same way). None
    if ``key`` is not such a filter."""
    view = lean_generations(reader, key, cluster, now)
    if view is None:
        return None
    meta = lean_meta_key(key, cluster)
    fields = {text_of(k): v for k, v in reader.hgetall(meta).items()}
    raw = fields.get("count")
    own = 0 if raw is None else reader.parse(lambda: integer(raw, meta, "count", low=0), 0)
    if fields.get("forever") == b"1":
        try:
            layout = layout_from_meta(fields, meta)
        except (UnreadableValueError, ValueError):  # said by lean_generations() already
            return own + view["alive"]
        base = slot_base(key, cluster)
        keys = [layout.bucket_key(base, b) for b in _sampled(layout.buckets)]
        own = max(own, _estimate(reader, keys, layout.buckets))
    return own + view["alive"]


def _sampled(buckets: int) -> list[int]:
    """The buckets counted of ``buckets``: at most :data:`SAMPLE`, evenly spread."""
    return list(range(0, buckets, max(1, buckets // SAMPLE)))


def _estimate(reader: Reader, keys: list[str], buckets: int) -> int:
    """The members of ``buckets`` sets, from SCARD of ``keys`` (a sample of them; a key
    of another type counts 0)."""
    pipe = reader.server.pipeline(transaction=False)
    for bucket_key in keys:
        pipe.scard(bucket_key)
    counts = [c if isinstance(c, int) else 0 for c in pipe.execute(raise_on_error=False)]
    return round(sum(counts) * buckets / len(keys))


def _sorted_set(reader: Reader, key: str, now: float) -> dict:
    now_ms = int(now * 1000)

    def count(low: Any, high: Any) -> int:
        command = lambda: int(reader.server.zcount(key, low, high))  # noqa: E731
        return reader.read(key, "sorted set", command, 0)

    return {
        "layout": "sorted set",
        "alive": count(f"({now_ms}", "+inf"),
        "forever": count("+inf", "+inf"),
        "expiring_soon": count(f"({now_ms}", now_ms + SOON * 1000),
        "expired": count("-inf", now_ms),
    }


def _lean(reader: Reader, key: str, cluster: bool, now: float, lifetime_ms: int) -> dict:
    meta = lean_meta_key(key, cluster)
    fields = {text_of(k): v for k, v in reader.hgetall(meta).items()}
    if "gen_buckets" not in fields:  # no worker has opened its generations yet
        return {**_no_lean(lifetime_ms), "alive": 0, "expiring_soon": 0}
    try:
        layout = layout_from_meta(fields, meta)
        buckets = min(
            integer(fields.get("gen_buckets"), meta, "gen_buckets", low=1), layout.buckets
        )
        part = integer(fields.get("gen_part"), meta, "gen_part", low=1)
    except (UnreadableValueError, ValueError) as exc:
        problem = exc if isinstance(exc, UnreadableValueError) else None
        return reader.failed(problem or UnreadableValueError(meta, str(exc)), _no_lean(lifetime_ms))
    span = -(-lifetime_ms // GENERATIONS)
    live = int(now * 1000) // span + 1
    base = slot_base(key, cluster)
    sampled = _sampled(buckets)
    generations, alive, soon = [], 0, 0
    for k in range(live, live + GENERATIONS + 1):
        parts = range(max(0, _recorded(reader, fields, meta, k)) // part + 1)
        keys = [lean_generation_key(base, k, j, b, buckets) for b in sampled for j in parts]
        held = _estimate(reader, keys, buckets * len(parts))
        ends_in = max(0.0, round(k * span / 1000 - now, 3))
        generations.append(
            {
                "generation": k,
                "expires_in": ends_in,
                "fingerprints": held,
                "estimated": len(sampled) < buckets,
            }
        )
        alive += held
        soon += held if ends_in <= SOON else 0
    view = _no_lean(lifetime_ms)
    view.update(alive=alive, expiring_soon=soon, generations=generations)
    return view


def _recorded(reader: Reader, fields: dict[str, Any], meta: str, generation: int) -> int:
    """The fingerprints the meta hash counts in ``generation`` (0 if none, or unreadable)."""
    name = f"g{generation}"
    return reader.parse(partial(integer, fields.get(name, 0), meta, name), 0)


def _no_lean(lifetime_ms: int, layout: str = "lean") -> dict:
    return {"layout": layout, "lifetime": lifetime_ms / 1000, "generations": []}


def bloom_generations(reader: Reader, key: str, cluster: bool, now: float) -> dict | None:
    """A Bloom filter's live time generations (dupefilters/bloom_expiry.py): the count
    each holds (a string, or a RedisBloom filter's BF.CARD) and when it expires whole;
    None for a Bloom filter whose fingerprints do not expire."""
    lifetime = reader.hget(key, "lifetime_ms")
    if lifetime is None:
        return None
    lifetime_ms = reader.parse(lambda: integer(lifetime, key, "lifetime_ms", low=0), 0)
    if not lifetime_ms:
        return None
    span = -(-lifetime_ms // BLOOM_GENERATIONS)
    live = int(now * 1000) // span + 1
    generations, alive, soon = [], 0, 0
    for k in range(live - 1, live + BLOOM_GENERATIONS + 2):
        held = _bloom_count(reader, bloom_generation_key(key, k, cluster))
        if held is None:
            continue
        ends_in = max(0.0, round(k * span / 1000 - now, 3))
        generations.append(
            {"generation": k, "expires_in": ends_in, "fingerprints": held, "estimated": False}
        )
        alive += held
        soon += held if ends_in <= SOON else 0
    view = _no_lean(lifetime_ms, "bloom")
    view.update(alive=alive, expiring_soon=soon, generations=generations)
    return view


def _bloom_count(reader: Reader, key: str) -> int | None:
    """The fingerprints one Bloom generation holds (None: it does not exist)."""
    kind = reader.type(key)
    if kind == "string":
        raw = reader.server.get(key)
        return None if raw is None else reader.parse(lambda: integer(raw, key, "count", low=0), 0)
    if kind == "MBbloom--":
        return int(reader.server.execute_command("BF.CARD", key))
    return None


def _merged_generations(views: list[dict]) -> list[dict]:
    """The lanes' generations, summed per generation."""
    merged: dict[int, dict] = {}
    for view in views:
        for gen in view["generations"]:
            into = merged.setdefault(gen["generation"], {**gen, "fingerprints": 0})
            into["fingerprints"] += gen["fingerprints"]
            into["estimated"] = into["estimated"] or gen["estimated"]
    return [merged[k] for k in sorted(merged)]


def render_due(view: dict) -> str:
    """The requests due later as a line of ``scrapy redis status``."""
    if not view["count"]:
        return "none"
    line = f"{view['count']:,}"
    if view["due_now"]:
        line += f", {view['due_now']:,} due now (moved into the queue within a second)"
    if view["next_due_in"]:
        line += f", next due in {duration(view['next_due_in'])}"
    return line


def render_expiring(view: dict) -> list[str]:
    """The fingerprints that expire as lines of ``scrapy redis status``."""
    soon = duration(view["soon_seconds"])
    line = f"{view['alive']:,} alive, {view['expiring_soon']:,} expire within {soon}"
    if view["layout"] == "sorted set":
        line += f", {view['forever']:,} kept forever, {view['expired']:,} expired (not removed yet)"
        return [line]
    lines = [f"{line} ({view['layout']} generations, lifetime {duration(view['lifetime'])})"]
    for gen in view["generations"]:
        about = "about " if gen["estimated"] else ""
        lines.append(
            f"generation {gen['generation']}: {about}{gen['fingerprints']:,} fingerprints, "
            f"expires in {duration(gen['expires_in'])}"
        )
    return lines


def duration(seconds: float) -> str:
    """``seconds`` for a person: in s, min or h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
