"""The crawls' numbers in Prometheus' text exposition format (version 0.0.4).

Rendered from the JSON form of :class:`scrapy_redis.fleet.status.CrawlStatus`
(``to_json()``), one labelled sample per spider (and per worker); a number that
is unknown (``None``) is left out rather than reported as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

#: The content type of the format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Status = Mapping[str, Any]

#: Gauges read from one field of a crawl's status: (name, field, help).
_CRAWL_GAUGES = (
    ("scrapy_redis_queued", "queued", "Requests waiting in the queue."),
    ("scrapy_redis_leased", "leased", "Requests leased by workers."),
    ("scrapy_redis_invalid", "invalid", "Queue entries set aside as undecodable."),
    ("scrapy_redis_dead_letters", "dead_letters", "Dead letters (requests and start messages)."),
    ("scrapy_redis_start_pending", "start_pending", "Start messages waiting."),
    ("scrapy_redis_start_leased", "start_leased", "Start messages leased by workers."),
    ("scrapy_redis_start_invalid", "start_invalid", "Start messages set aside as invalid."),
    ("scrapy_redis_fingerprints", "fingerprints", "Fingerprints in the duplicate filter."),
    ("scrapy_redis_items", "items", "Items in the RedisPipeline list."),
)

#: Fleet counters read from the shared stats hash: (name, stat, help).
_CRAWL_COUNTERS = (
    ("scrapy_redis_pages_total", "response_received_count", "Responses received (all workers)."),
    ("scrapy_redis_items_total", "item_scraped_count", "Items scraped (all workers)."),
)

#: Gauges of each worker: (name, field, help).
_WORKER_GAUGES = (
    ("scrapy_redis_worker_heartbeat_age_seconds", "heartbeat_age", "Seconds since its heartbeat."),
    ("scrapy_redis_worker_leased", "leased", "Requests it holds under lease."),
    ("scrapy_redis_worker_start_leased", "start_leased", "Start messages it holds under lease."),
    ("scrapy_redis_worker_pages_per_second", "pages_per_second", "Its pages per second."),
    ("scrapy_redis_worker_items_per_second", "items_per_second", "Its items per second."),
)


def escape(value: str) -> str:
    """A label value as the format writes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    return None


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{name}="{escape(value)}"' for name, value in labels.items())


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], Any]]
) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        text = _number(value)
        if text is not None:
            lines.append(f"{name}{{{_labels(labels)}}} {text}")
    return lines


def _per_crawl(statuses: Sequence[Status], read: Callable[[Status], Any]) -> list[Any]:
    return [({"spider": status["spider"]}, read(status)) for status in statuses]


def _per_worker(statuses: Sequence[Status], field: str) -> list[Any]:
    return [
        ({"spider": status["spider"], "worker": worker["id"]}, worker.get(field))
        for status in statuses
        for worker in status.get("workers", [])
    ]


def _stat(name: str) -> Callable[[Status], Any]:
    """Reads the fleet stat ``name`` of a status (0 if not counted yet)."""
    return lambda status: status.get("stats", {}).get(name, 0)


def _alive(status: Status) -> int:
    return sum(1 for worker in status.get("workers", []) if worker["alive"])


_SLOT_GAUGES = [
    ("scrapy_redis_slot_queued", "queued", "Requests queued for the download slot."),
    ("scrapy_redis_slot_in_flight", "in_flight", "Downloads of the slot in flight, fleet-wide."),
    ("scrapy_redis_slot_rate", "rate", "The slot's starts a second, fleet-wide, last minute."),
    ("scrapy_redis_slot_delay_seconds", "delay", "The slot's delay for the fleet."),
    ("scrapy_redis_slot_next_start_seconds", "next_start_in", "Seconds until its next start."),
    ("scrapy_redis_slot_retry_after_seconds", "retry_after_for", "Seconds a Retry-After holds it."),
]


def _per_slot(statuses: Sequence[Status], field: str) -> list[Any]:
    """The busiest download slots (SCHEDULER_FLEET_LIMITS), as ``status`` shows them."""
    return [
        ({"spider": status["spider"], "slot": slot["slot"]}, slot.get(field))
        for status in statuses
        for slot in status.get("slots", [])
    ]


#: Requests due later and fingerprints that expire (fleet/later.py): (name, part of the
#: status, field, help).
_LATER_GAUGES = [
    ("scrapy_redis_due_later", "due_later", "count", "Requests due later (in <queue>:due)."),
    ("scrapy_redis_due_now", "due_later", "due_now", "Requests due later that are due now."),
    ("scrapy_redis_due_next_seconds", "due_later", "next_due_in",
     "Seconds until the next request due later is due (server clock)."),
    ("scrapy_redis_fingerprints_alive", "expiring", "alive",
     "Fingerprints alive in a filter whose fingerprints expire (DUPEFILTER_LIFETIME)."),
    ("scrapy_redis_fingerprints_expiring_soon", "expiring", "expiring_soon",
     "Fingerprints that expire within the next hour."),
    ("scrapy_redis_fingerprints_forever", "expiring", "forever",
     "Fingerprints kept forever (the set filter's sorted set)."),
    ("scrapy_redis_fingerprints_expired", "expiring", "expired",
     "Fingerprints expired but not removed yet (the set filter's sorted set)."),
]  # fmt: skip


#: Gauges of each live generation of a lean or Bloom filter: (name, field, help).
_GENERATION_GAUGES = (
    ("scrapy_redis_fingerprint_generation_size", "fingerprints",
     "Fingerprints in a live generation of a lean filter (estimated from a sample) "
     "or of a Bloom filter (its count); label age: 0 the newest."),
    ("scrapy_redis_fingerprint_generation_expires_seconds", "expires_in",
     "Seconds until a live generation of a lean or Bloom filter expires whole."),
    ("scrapy_redis_fingerprint_generation_number", "generation",
     "A live generation's number (the server's time over half the lifetime): it grows "
     "as the generations turn over."),
)  # fmt: skip


def _later(part: str, field: str) -> Callable[[Status], Any]:
    return lambda status: (status.get(part) or {}).get(field)


def _per_generation(statuses: Sequence[Status], field: str) -> list[Any]:
    """A lean or Bloom filter's live generations of fingerprints that expire, labelled by
    their age rank (``age``: "0" the newest, the one expiring last; "1" the one before...)
    and not by their number, which grows every half lifetime: a bounded set of series."""
    return [
        ({"spider": status["spider"], "age": str(age)}, gen.get(field))
        for status in statuses
        for age, gen in enumerate(_newest_first(status))
    ]


def _newest_first(status: Status) -> list[Mapping[str, Any]]:
    generations = (status.get("expiring") or {}).get("generations", [])
    return sorted(generations, key=lambda gen: -int(gen["generation"]))


def _later_lines(statuses: Sequence[Status]) -> list[str]:
    lines: list[str] = []
    for name, part, field, help_text in _LATER_GAUGES:
        lines += _family(name, "gauge", help_text, _per_crawl(statuses, _later(part, field)))
    for name, field, help_text in _GENERATION_GAUGES:
        lines += _family(name, "gauge", help_text, _per_generation(statuses, field))
    return lines


def _next_run(status: Status) -> Any:
    """When the first recurring start message is due next (POSIX seconds), or None."""
    first = status.get("recurring_next") or [{}]
    return first[0].get("next_run")


def _recurring_families(statuses: Sequence[Status]) -> list[str]:
    """Recurring start messages (``scrapy redis push --every``): a count, the next run."""
    count = _per_crawl(statuses, lambda status: status.get("recurring", 0))
    lines = _family("scrapy_redis_recurring", "gauge", "Recurring start messages.", count)
    return lines + _family(
        "scrapy_redis_recurring_next_run_timestamp_seconds",
        "gauge",
        "When the next recurring start message is due (Redis server's clock).",
        _per_crawl(statuses, _next_run),
    )


def render(statuses: Sequence[Status]) -> str:
    """The exposition of ``statuses`` (a list of ``CrawlStatus.to_json()``)."""
    lines: list[str] = []
    for name, field, help_text in _CRAWL_GAUGES:
        lines += _family(name, "gauge", help_text, _per_crawl(statuses, itemgetter(field)))
    alive = _per_crawl(statuses, _alive)
    lines += _family("scrapy_redis_workers_alive", "gauge", "Workers alive.", alive)
    for name, stat, help_text in _CRAWL_COUNTERS:
        lines += _family(name, "counter", help_text, _per_crawl(statuses, _stat(stat)))
    for name, field, help_text in _WORKER_GAUGES:
        lines += _family(name, "gauge", help_text, _per_worker(statuses, field))
    for name, field, help_text in _SLOT_GAUGES:
        lines += _family(name, "gauge", help_text, _per_slot(statuses, field))
    lines += _recurring_families(statuses)
    slot_starts = _per_slot(statuses, "starts")
    lines += _family("scrapy_redis_slot_starts_total", "counter", "Downloads started.", slot_starts)
    lines += _later_lines(statuses)
    return "\n".join(lines) + "\n"


class Reads(NamedTuple):
    """The dashboard's own numbers: whether its last status read worked, how many reads
    it started, the last one's age and duration (seconds), and the wrong tokens sent."""

    ok: bool
    started: int
    age: float
    took: float
    token_failures: int


def render_dashboard(reads: Reads, error: str | None = None) -> str:
    """The exposition of the dashboard's own numbers (``error``: why the read failed,
    as a comment line)."""
    families = [
        ("scrapy_redis_dashboard_status_ok", "gauge", "1 if the last status read worked.",
         int(reads.ok)),
        ("scrapy_redis_dashboard_status_reads_total", "counter",
         "Status reads started (one at a time, shared by every viewer).", reads.started),
        ("scrapy_redis_dashboard_status_age_seconds", "gauge",
         "Seconds since the status shown was read.", round(reads.age, 3)),
        ("scrapy_redis_dashboard_status_read_seconds", "gauge",
         "Seconds the last status read took.", round(reads.took, 3)),
        ("scrapy_redis_dashboard_token_failures_total", "counter",
         "Wrong tokens sent (login form or bearer).", reads.token_failures),
    ]  # fmt: skip
    lines = [f"# error: {' '.join(error.split())}"] if error else []
    for name, kind, help_text, value in families:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"
