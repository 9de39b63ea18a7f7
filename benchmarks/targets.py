"""The speed and memory goals of ours against the original, as data.

Each Target names the measured key (a field of sched_bench.py's JSON or of a
crawl's measures), what is compared (the ratio ours / original of the medians,
or ours' median alone), the bound and the threshold. The report renders the
"target" column of its tables and the closing "Targets" list from Verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from report_format import ratio, rx


@dataclass(frozen=True)
class Target:
    """A goal: ``key`` compared by ``bound`` with ``threshold``.

    ``name``: how the Targets list words it (followed by the queue class or the
    worker count); ``ours_only``: the threshold is on ours' value itself, not on
    the ratio ours / original.
    """

    key: str
    name: str
    bound: Literal["≥", "≤"]
    threshold: float
    ours_only: bool = False

    @property
    def unit(self) -> str:
        return "" if self.ours_only else "×"

    def judge(self, where: str, ours: float, original: float) -> Verdict:
        """The verdict for the medians ``ours`` and ``original`` measured at ``where``."""
        value = ours if self.ours_only else ratio(ours, original)
        met = value >= self.threshold if self.bound == "≥" else value <= self.threshold
        return Verdict(self, where, value, met)


@dataclass(frozen=True)
class Verdict:
    """A target judged at ``where`` (a queue class, or "1 worker(s)")."""

    target: Target
    where: str
    value: float
    met: bool

    @property
    def shown(self) -> str:
        """The value as the report shows it: a ratio with a third decimal when two would
        look like the threshold; ours' own value after "ours"."""
        if self.target.ours_only:
            return f"ours {self.value:.2f}"
        return rx(self.value, self.target.threshold)

    @property
    def goal(self) -> str:
        """E.g. "≥ 5×", "≤ 2"."""
        return f"{self.target.bound} {self.target.threshold:g}{self.target.unit}"

    def cell(self) -> str:
        """The table's "target" cell: the goal and a mark."""
        prefix = "ours " if self.target.ours_only else ""
        return f"{prefix}{self.goal} {'✅' if self.met else '❌'}"

    def line(self) -> str:
        """An item of the Targets list."""
        status = "✅ met" if self.met else "❌ not met"
        return f"- {status}: {self.target.name}, {self.where}: {self.shown} ({self.goal})"


#: Scheduler rates (sched_bench.py), per queue class: ours at least 5 times the original.
ENQUEUE = Target("enqueue_rate", "scheduler enqueue, new requests", "≥", 5.0)
DUP_ENQUEUE = Target("dup_enqueue_rate", "scheduler enqueue, 50% duplicates", "≥", 5.0)
DEQUEUE = Target("dequeue_rate", "scheduler dequeue", "≥", 5.0)
#: Redis memory per queued request, per queue class: at most half the original's.
MEMORY = Target("queue_bytes_per_request", "Redis bytes per queued request", "≤", 0.5)
#: End to end, per worker count (timed crawls).
PAGES = Target("pages_per_s", "end-to-end pages/s", "≥", 1.3)
CPU = Target("worker_cpu_ms_per_page", "worker CPU per page", "≤", 0.85)
#: Per worker count (proxied crawls): ours' own count.
ROUND_TRIPS = Target("round_trips_per_page", "Redis round trips per page", "≤", 2.0, True)

TARGETS = (ENQUEUE, DUP_ENQUEUE, DEQUEUE, MEMORY, PAGES, CPU, ROUND_TRIPS)
