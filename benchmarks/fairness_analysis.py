"""What the sites of the fairness benchmark saw (benchmarks/fairness.py): from their
arrival log, the end of the crawl and of the small sites, each site's rate and peak rate,
and the gaps between two requests to one site shorter than 0.9 times the delay."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shape:
    """The crawl's sizes and limits, from the command line."""

    big_pages: int
    small_sites: int
    small_pages: int
    delay: float
    workers: int
    idle: int

    @property
    def ideal(self) -> float:
        return self.big_pages * self.delay


def peak_rate(times: list[float], window: float) -> float:
    """The most requests that arrived within any ``window`` seconds, per second."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most / window


def short_gaps(arrivals: list[list[float]], pushed: float, delay: float) -> list[dict[str, Any]]:
    """The gaps below 0.9 ``delay`` between two requests to one site, shortest first: when
    (from the push), the site, and whether the earlier request opened a new connection."""
    by_site: dict[int, list[list[float]]] = {}
    for arrival in sorted(arrivals):
        by_site.setdefault(int(arrival[1]), []).append(arrival)
    found = [
        {
            "gap": b[0] - a[0],
            "at": a[0] - pushed,
            "site": site,
            "pages": [a[2], b[2]],
            "earlier_new_connection": a[4] == 1,
            "same_connection": a[3] == b[3],
        }
        for site, values in by_site.items()
        for a, b in itertools.pairwise(values)
        if b[0] - a[0] < 0.9 * delay
    ]
    return sorted(found, key=lambda gap: gap["gap"])


def analyse(arrivals: list[list[float]], pushed: float, shape: Shape) -> dict[str, Any]:
    """What the sites saw, from their arrival log (times relative to the push)."""
    times: dict[int, list[float]] = {}
    pages: dict[int, set[int]] = {}
    for at, site, page, *_ in arrivals:
        times.setdefault(int(site), []).append(at - pushed)
        pages.setdefault(int(site), set()).add(int(page))
    for values in times.values():
        values.sort()
    rates = {
        s: (len(t) - 1) / (t[-1] - t[0]) for s, t in times.items() if len(t) > 1 and t[-1] > t[0]
    }
    small = list(range(1, 1 + shape.small_sites))
    complete = [s for s in small if len(pages.get(s, ())) == shape.small_pages]
    short = short_gaps(arrivals, pushed, shape.delay)
    return {
        "requests": len(arrivals),
        "pages": sum(len(p) for p in pages.values()),
        "expected_pages": shape.big_pages + shape.small_sites * shape.small_pages,
        "end_s": max(at for values in times.values() for at in values),
        "big_done_s": times[0][-1] if 0 in times else None,
        "small_done_s": max(times[s][-1] for s in small) if len(complete) == len(small) else None,
        "small_sites_complete": len(complete),
        "big_rate": rates.get(0, 0.0),
        "max_site_rate": max(rates.values()),
        "max_small_rate": max((r for s, r in rates.items() if s != 0), default=0.0),
        "peak_rate": max(peak_rate(t, 10 * shape.delay) for t in times.values()),
        "min_gap": min(b - a for t in times.values() for a, b in itertools.pairwise(t)),
        "gaps_below": len(short),
        "gaps_below_after_new_connection": sum(g["earlier_new_connection"] for g in short),
        "gaps": sum(len(t) - 1 for t in times.values()),
        "shortest_gaps": short[:20],
    }
