"""The download slots of a crawl queued per slot (SCHEDULER_FLEET_LIMITS), as ``scrapy
redis status`` shows them: the busiest by queued requests, with their downloads in
flight, starts so far, the fleet's rate (starts a second over the last minute), next
allowed start, delay, and whether a Retry-After or AutoThrottle slowed them. Read-only;
a crawl of very many slots is sampled (:data:`SCAN_LIMIT` slots per lane)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgpack  # type: ignore[import-untyped]

from scrapy_redis.store.keys import slot_list_key, slot_queue_keys, slot_store_keys

#: Slots read per lane at most (HSCAN).
SCAN_LIMIT = 10_000
#: Slots shown.
TOP = 10


def slot_views(
    server: Any, queue_keys: Sequence[str], cluster: bool, now: float, top: int = TOP
) -> list[dict[str, Any]]:
    """The ``top`` slots with the most queued requests (``now``: the server's clock, s)."""
    views: list[dict[str, Any]] = []
    for queue_key in queue_keys:
        states = _states(server, slot_queue_keys(queue_key, cluster)[3])
        if not states:
            continue
        queued = _queued(server, queue_key, cluster, list(states))
        for (slot, state), count in zip(states.items(), queued, strict=True):
            views.append(_view(slot, state, count, now))
    views.sort(key=lambda view: (-view["queued"], -view["in_flight"], view["slot"]))
    return views[:top]


def _queued(server: Any, queue_key: str, cluster: bool, slots: list[bytes]) -> list[int]:
    """The requests queued per slot: its members of pq (inline requests, and one group
    per list: a list per priority with more than a few requests, see
    lua/_slot_store.lua), and what its lists hold beyond one each."""
    pq = slot_queue_keys(queue_key, cluster)[0]
    lists = slot_store_keys(queue_key, cluster)[0]
    pipe = server.pipeline(transaction=False)
    for slot in slots:
        low, high = b"[" + slot + b"\0", b"(" + slot + b"\1"
        pipe.zlexcount(pq, low, high)
        pipe.zrangebylex(lists, low, high)
    replies = pipe.execute()
    counts = [int(inline) for inline in replies[::2]]
    found = [(n, group) for n, groups in enumerate(replies[1::2]) for group in groups]
    if found:
        pipe = server.pipeline(transaction=False)
        for _, group in found:
            pipe.llen(slot_list_key(queue_key, group, cluster))
        for (n, _), length in zip(found, pipe.execute(), strict=True):
            counts[n] += int(length) - 1  # (its group in pq counted one)
    return counts


def _states(server: Any, slots_key: str) -> dict[bytes, list[Any]]:
    states: dict[bytes, list[Any]] = {}
    for slot, raw in server.hscan_iter(slots_key, count=1000):
        try:
            state = msgpack.unpackb(raw, raw=True)
        except (ValueError, msgpack.ExtraData):  # not ours: shown as nothing
            continue
        if isinstance(state, list) and len(state) >= 6:
            states[slot] = state
        if len(states) >= SCAN_LIMIT:
            break
    return states


def _field(state: list[Any], index: int) -> float:
    """A number of the state; 0 for one that is not a finite number (a bad value, which
    the scripts replace when they next read the state)."""
    value = state[index] if len(state) > index else 0
    number = float(value) if isinstance(value, (int, float)) else 0.0
    return number if math.isfinite(number) else 0.0


def _view(slot: bytes, state: list[Any], queued: int, now: float) -> dict[str, Any]:
    now_ms = now * 1000
    return {
        "slot": slot.decode("utf-8", "replace"),
        "queued": queued,
        "in_flight": int(_field(state, 1)),
        "starts": int(_field(state, 12)),
        "rate": fleet_rate(state, now_ms),
        "next_start_in": max(0.0, (_field(state, 0) - now_ms) / 1000),
        "delay": max(_field(state, 2), _field(state, 11)) / 1000,
        "concurrency": int(_field(state, 3)),
        "retry_after_for": max(0.0, (_field(state, 9) - now_ms) / 1000),
        "autothrottle": _field(state, 10) == 1,
    }


def fleet_rate(state: list[Any], now_ms: float) -> float:
    """The slot's starts a second over the last minute, fleet-wide: the starts counted in
    this minute and the one before (fields 15-17), the latter weighted by the part of it
    still within the last 60 s; if the counts began less than a minute ago (field 18:
    their first start), the starts after the first over that time (at least a second),
    not over 60 s."""
    minute, count, before = _field(state, 14), _field(state, 15), _field(state, 16)
    now_minute = now_ms // 60000
    if minute == now_minute - 1:
        count, before = 0.0, count
    elif minute != now_minute:
        return 0.0
    since = _field(state, 17)
    if 0 < since <= now_ms < since + 60000:  # a slot counting for less than a minute
        starts, seconds = count + before, max(1.0, (now_ms - since) / 1000)
        # (the gaps since the first start: n starts a delay d apart show 1 / d)
        return round((starts - 1 if starts > 1 else starts) / seconds, 3)
    elapsed = (now_ms % 60000) / 60000
    return round((count + before * (1 - elapsed)) / 60, 3)


def render_slot(view: dict[str, Any]) -> str:
    """One slot as a line of ``scrapy redis status``."""
    cap = view["concurrency"] or "no cap"
    line = (
        f"{view['slot']}: {view['queued']:,} queued, {view['in_flight']} in flight (of {cap}), "
        f"{view['starts']:,} started, {view.get('rate', 0):.2f}/s, delay {view['delay']:g} s, "
        f"next start in {view['next_start_in']:.1f} s"
    )
    if view["retry_after_for"]:
        line += f", slowed by Retry-After for {view['retry_after_for']:.0f} s"
    if view["autothrottle"]:
        line += ", delay set by AutoThrottle"
    return line
