"""How the report writes numbers, table rows and the notes both of its parts share."""

from __future__ import annotations

from typing import Any

from _util import Crawls, summary

#: Rows of the crawls' details in both parts of the report: (metric, title).
CRAWL_DETAILS = (
    ("redis_commands_per_page", "Redis commands executed/page (INFO, incl. inside scripts)"),
    ("redis_cpu_ms_per_page", "redis-server CPU ms/page"),
    ("tail_s", "seconds from last response to last exit"),
)


def fmt(value: float) -> str:
    """A number with the digits that matter: 12,345 / 123 / 12.3 / 1.23."""
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(values: list[float]) -> str:
    """Median (min–max) of the runs; the value alone for one run."""
    s = summary(values)
    if len(values) == 1:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def median(values: list[float]) -> float:
    return summary(values)["median"]


def rx(value: float, target: float) -> str:
    """A ratio for a target's line: a third decimal when two would look like the target."""
    return f"{value:.3f}×" if f"{value:.2f}" == f"{target:.2f}" else f"{value:.2f}×"


def ratio(ours: float, original: float) -> float:
    return ours / original if original else float("nan")


def times(ours: float, original: float) -> str:
    """The ratio of two medians as a table shows it: ``0.12×``."""
    return f"{ratio(ours, original):.2f}×"


def row(*cells: str) -> str:
    """A markdown table row; an empty cell is written ``| |``."""
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def plural(workers: int) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}"


def values(crawls: Crawls, key: str, metric: str) -> list[float]:
    """``metric`` of each crawl of ``key`` that measured it (none when ``key`` is absent)."""
    return [r[metric] for r in crawls.get(key, []) if metric in r]


def steal_note(timed: Crawls) -> str:
    """The cores the hypervisor took from this VM during the crawls, when measured."""
    steal = [r["steal_cores"] for v in timed.values() for r in v if "steal_cores" in r]
    return f"; the hypervisor took {cell(steal)} (steal time)" if steal else ""


def foreign_note(timed: Crawls) -> str:
    """The cores other processes of the machine used during the timed crawls."""
    return (
        "Other processes on this shared machine used "
        + cell([r.get("foreign_cores", 0.0) for v in timed.values() for r in v])
        + " of the 2 cores during the timed crawls (median (min–max); a noise indicator)"
        + steal_note(timed)
    )


def pages_split(compared: str, first: list[dict[str, Any]], second: list[dict[str, Any]]) -> str:
    """The pages each worker crawled in each run's 2-worker crawls of two configurations."""
    return f"Pages per worker in the 2-worker crawls ({compared}): " + "; ".join(
        f"{'+'.join(map(str, a.get('responses_per_worker', [])))} / "
        f"{'+'.join(map(str, b.get('responses_per_worker', [])))}"
        for a, b in zip(first, second, strict=False)
    )
