"""A deterministic local website to crawl: the demo's and the end-to-end tests' target.

The site has ``pages`` pages, ``/p/0.html`` to ``/p/<pages - 1>.html``, and an
index ``/``. Every page has a ``<title>`` and about ten links, drawn from a
random generator seeded with the page number, so the same site is served every
time and most links point at pages already linked elsewhere (many duplicates
for the dupefilter). Page ``i`` always links to pages ``3i+1`` to ``3i+3``, so
every page is reachable from ``/``, in a few hops. Some pages also link to:

* ``/r/<j>``: a ``302`` redirect to ``/p/<j>.html``;
* ``/missing/<j>.html``: a ``404``;
* ``/error/<j>.html``: a ``500`` for the first ``error_failures`` requests of
  that path (default 1), then a small page. Scrapy retries ``500`` twice by
  default, so the crawl recovers these pages without logging an error.

Pages never link back to ``/``. Every request is counted per path: ``site.hits``
(read it with ``site.snapshot()`` while the site runs) and ``GET /__hits`` (JSON);
paths starting with ``/__`` are not counted.
:func:`site_map` tells which paths exist and :func:`expected_hits` how often a
complete crawl fetches each, so tests can check exact coverage.

Use it in-process::

    site = DemoSite(pages=1000).start()   # port 0: a free port
    ... crawl site.url ...
    site.stop()

or from the command line: ``python demo_site.py --port 8000 --pages 1000``.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

DEFAULT_PAGES = 1000
DEFAULT_PORT = 8000
DEFAULT_SEED = 2024
#: Tree fan-out: page i links to pages FANOUT*i + 1 .. FANOUT*i + FANOUT.
FANOUT = 3
#: Extra links per page to pages drawn at random (the duplicates).
RANDOM_LINKS = 7
#: Chance that a page links to a redirect, a missing page, an erroring page.
REDIRECT_RATE = 0.3
MISSING_RATE = 0.1
ERROR_RATE = 0.05
#: Seconds a request held by DemoSite.hold_after() waits at most for release().
HOLD_LIMIT = 300.0


def page_path(i: int) -> str:
    return f"/p/{i}.html"


@dataclass(frozen=True)
class PageLinks:
    """What one page links to."""

    pages: tuple[int, ...]
    redirects: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()
    errors: tuple[int, ...] = ()

    def paths(self) -> list[str]:
        return [
            *(page_path(j) for j in self.pages),
            *(f"/r/{j}" for j in self.redirects),
            *(f"/missing/{j}.html" for j in self.missing),
            *(f"/error/{j}.html" for j in self.errors),
        ]


def page_links(i: int, pages: int, seed: int = DEFAULT_SEED) -> PageLinks:
    """The links of page ``i`` (``-1`` for the index), the same on every call."""
    rng = random.Random(seed * 1_000_003 + i)
    if i < 0:  # the index: the tree's root and a few random pages
        return PageLinks((0, *(rng.randrange(pages) for _ in range(RANDOM_LINKS + 2))))
    children = range(FANOUT * i + 1, min(FANOUT * i + FANOUT, pages - 1) + 1)
    linked = (*children, *(rng.randrange(pages) for _ in range(RANDOM_LINKS)))
    return PageLinks(
        linked,
        redirects=_maybe(rng, REDIRECT_RATE, pages),
        missing=_maybe(rng, MISSING_RATE, pages),
        errors=_maybe(rng, ERROR_RATE, pages),
    )


def _maybe(rng: random.Random, rate: float, pages: int) -> tuple[int, ...]:
    return (rng.randrange(pages),) if rng.random() < rate else ()


@dataclass(frozen=True)
class SiteMap:
    """Every path a complete crawl of the site requests, by kind."""

    pages: frozenset[str]
    redirects: frozenset[str]
    missing: frozenset[str]
    errors: frozenset[str]

    @property
    def ok_pages(self) -> frozenset[str]:
        """Paths finally answered with 200: the index, the pages, the recovered errors."""
        return frozenset({"/", *self.pages, *self.errors})


@lru_cache(maxsize=8)
def site_map(pages: int = DEFAULT_PAGES, seed: int = DEFAULT_SEED) -> SiteMap:
    """The paths of the site of ``pages`` pages that are reachable from ``/``."""
    redirects: set[str] = set()
    missing: set[str] = set()
    errors: set[str] = set()
    for i in range(-1, pages):
        links = page_links(i, pages, seed)
        redirects.update(f"/r/{j}" for j in links.redirects)
        missing.update(f"/missing/{j}.html" for j in links.missing)
        errors.update(f"/error/{j}.html" for j in links.errors)
    # Every page is reachable through the tree links; prove it rather than trust it.
    seen, todo = {0}, [0]
    while todo:
        for j in page_links(todo.pop(), pages, seed).pages:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    if len(seen) != pages:  # pragma: no cover - a bug in page_links()
        raise AssertionError(f"only {len(seen)} of {pages} pages are reachable")
    return SiteMap(
        frozenset(page_path(i) for i in range(pages)),
        frozenset(redirects),
        frozenset(missing),
        frozenset(errors),
    )


def expected_pages(pages: int = DEFAULT_PAGES, seed: int = DEFAULT_SEED) -> set[str]:
    """URL paths of every reachable page answered with 200 (index and recovered errors included)."""
    return set(site_map(pages, seed).ok_pages)


def expected_hits(
    pages: int = DEFAULT_PAGES, seed: int = DEFAULT_SEED, error_failures: int = 1
) -> dict[str, int]:
    """Hits per path after one complete crawl that fetches each URL once (Scrapy's defaults:
    2 retries, redirects followed)."""
    smap = site_map(pages, seed)
    hits = dict.fromkeys(smap.pages | smap.redirects | smap.missing | {"/"}, 1)
    hits.update(dict.fromkeys(smap.errors, error_failures + 1))
    return hits


class DemoSite:
    """The site, served by a threaded HTTP/1.1 server (keep-alive) on 127.0.0.1."""

    def __init__(
        self,
        pages: int = DEFAULT_PAGES,
        port: int = 0,
        host: str = "127.0.0.1",
        seed: int = DEFAULT_SEED,
        error_failures: int = 1,
    ) -> None:
        if pages < 1:
            raise ValueError(f"pages must be at least 1, not {pages!r}")
        self.pages = pages
        self.host = host
        self.seed = seed
        self.error_failures = error_failures
        self.hits: Counter[str] = Counter()
        #: time.monotonic() of the last counted hit (None before the first).
        self.last_hit: float | None = None
        self._lock = threading.Lock()
        #: hold_after(): requests beyond this many wait until release() (None: none wait).
        self._hold_after: int | None = None
        self._released = threading.Event()
        self._server = _Server((host, port), _Handler)
        self._server.site = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The start URL (the index), with a trailing slash."""
        return f"http://{self.host}:{self.port}/"

    def start(self) -> DemoSite:
        """Serve in a background (daemon) thread; returns ``self``."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"demo-site-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def __enter__(self) -> DemoSite:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def snapshot(self) -> dict[str, int]:
        """A copy of the hit counts, taken atomically."""
        with self._lock:
            return dict(self.hits)

    def reset_hits(self) -> None:
        with self._lock:
            self.hits.clear()
            self.last_hit = None

    def count(self, path: str) -> int:
        """Record one hit of ``path``; returns how many hits it has now."""
        with self._lock:
            self.hits[path] += 1
            self.last_hit = time.monotonic()
            hit, total = self.hits[path], self.hits.total()
        if self._hold_after is not None and total > self._hold_after:
            self._released.wait(HOLD_LIMIT)
        return hit

    def hold_after(self, count: int) -> None:
        """Answer the first ``count`` requests (counted ones), then keep the next ones
        waiting until :meth:`release` (at most HOLD_LIMIT seconds): a crawl that
        cannot end while a test looks at it."""
        self._released.clear()
        self._hold_after = count

    def release(self) -> None:
        """Answer the held requests, and every later one at once."""
        self._hold_after = None
        self._released.set()

    # -- content --------------------------------------------------------------------

    def respond(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for a GET of ``path``."""
        if path.startswith("/__"):  # the site's own API: not counted
            if path == "/__hits":
                hits = json.dumps(self.snapshot()).encode()
                return 200, {"Content-Type": "application/json"}, hits
            return 404, _HTML, _page_html("Not found", None)
        hit = self.count(path)
        kind, _, rest = path.lstrip("/").partition("/")
        number = _number(rest.removesuffix(".html") if kind != "r" else rest)
        if path == "/":
            return 200, _HTML, _page_html(self._index_title(), self._links(-1))
        if number is None or number >= self.pages:
            return 404, _HTML, _page_html("Not found", None)
        if kind == "p" and rest.endswith(".html"):
            return 200, _HTML, self._page(number)
        if kind == "r":
            return 302, {"Location": page_path(number), **_HTML}, b""
        if kind == "error" and rest.endswith(".html"):
            if hit <= self.error_failures:
                return 500, _HTML, _page_html("Internal server error", None)
            return 200, _HTML, _page_html(f"Recovered page {number}", PageLinks((number,)))
        return 404, _HTML, _page_html("Not found", None)

    def _index_title(self) -> str:
        return f"Demo site ({self.pages} pages)"

    def _links(self, i: int) -> PageLinks:
        return page_links(i, self.pages, self.seed)

    def _page(self, i: int) -> bytes:
        return _cached_page(i, self.pages, self.seed)


@lru_cache(maxsize=65536)
def _cached_page(i: int, pages: int, seed: int) -> bytes:
    return _page_html(f"Page {i}", page_links(i, pages, seed))


_HTML = {"Content-Type": "text/html; charset=utf-8"}


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) < 10 else None


def _page_html(title: str, links: PageLinks | None) -> bytes:
    items = "".join(
        f'<li><a href="{path}">{html.escape(path)}</a></li>'
        for path in (links.paths() if links else ())
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body><h1>{html.escape(title)}</h1>\n"
        f'<p class="description">{html.escape(title)} of the scrapy-redis demo site.</p>\n'
        f'<ul class="links">{items}</ul>\n</body></html>\n'
    ).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    site: DemoSite


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Scrapy reuses its connections
    server_version = "DemoSite/1.0"
    timeout = 60  # drop idle keep-alive connections eventually
    server: _Server

    def do_GET(self) -> None:
        status, headers, body = self.server.site.respond(urlsplit(self.path).path)
        head = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"Content-Length: {len(body)}")
        if self.close_connection:
            head.append("Connection: close")
        # One write: headers and body in one segment (no Nagle / delayed-ACK stall).
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="default %(default)s")
    parser.add_argument("--pages", type=int, default=DEFAULT_PAGES, help="default %(default)s")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="default %(default)s")
    parser.add_argument(
        "--error-failures",
        type=int,
        default=1,
        help="500 responses an /error/ page gives before it recovers (default %(default)s)",
    )
    args = parser.parse_args(argv)
    site = DemoSite(args.pages, args.port, args.host, args.seed, args.error_failures)
    print(f"Serving {args.pages} pages at {site.url} (hit counts: {site.url}__hits); Ctrl-C stops.")
    with contextlib.suppress(KeyboardInterrupt):
        site.serve_forever()


if __name__ == "__main__":
    main()
