"""A fast, deterministic local web site for the end-to-end benchmark.

``pages`` HTML pages; page ``i`` links to pages ``3i+1 .. 3i+3`` (a tree, so
every page is reachable from page 0, the start URL) and to 7 more pages drawn
from a generator seeded with ``i`` (most of them already linked elsewhere: the
duplicates the dupefilter must drop). URLs have a realistic length, e.g.
``/catalog/garden-tools/item-0001234-stainless-steel-hand-trowel.html``.

Every response is rendered once at start-up and served from memory by an
asyncio protocol (HTTP/1.1 keep-alive), so the site costs a few tens of
microseconds of CPU per request: the crawlers, not the site, are measured.
``GET /__stats`` returns ``{"hits": n, "pid": ...}`` (not counted) and
``GET /__reset`` zeroes the counter.

Run: ``python benchmarks/site_server.py --pages 5000 --port 0`` prints
``READY <port>`` on stdout once listening; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys

from _serve import serve_until_signalled

SECTIONS = (
    "garden-tools",
    "kitchen-appliances",
    "home-office",
    "outdoor-furniture",
    "lighting",
    "bathroom-accessories",
    "power-tools",
    "storage-solutions",
    "bedding-and-linen",
    "small-electronics",
    "pet-supplies",
    "camping-gear",
)
WORDS = (
    "stainless",
    "steel",
    "hand",
    "trowel",
    "ergonomic",
    "compact",
    "wireless",
    "premium",
    "classic",
    "deluxe",
    "adjustable",
    "portable",
    "foldable",
    "oak",
    "cordless",
    "set",
    "of",
    "two",
    "heavy",
    "duty",
    "led",
    "lamp",
    "desk",
    "chair",
    "cushion",
    "organizer",
    "drawer",
    "basket",
    "blanket",
    "cotton",
)
FANOUT = 3
RANDOM_LINKS = 7


def page_path(i: int) -> str:
    rng = random.Random(i * 7919 + 17)
    slug = "-".join(rng.choice(WORDS) for _ in range(4))
    return f"/catalog/{SECTIONS[i % len(SECTIONS)]}/item-{i:07d}-{slug}.html"


def page_links(i: int, pages: int) -> list[int]:
    rng = random.Random(i * 104729 + 3)
    children = [j for j in range(FANOUT * i + 1, FANOUT * i + FANOUT + 1) if j < pages]
    return children + [rng.randrange(pages) for _ in range(RANDOM_LINKS)]


def page_html(i: int, pages: int) -> bytes:
    rng = random.Random(i)
    title = page_path(i).rsplit("/", 1)[1][:-5].replace("-", " ")
    text = " ".join(rng.choice(WORDS) for _ in range(220))
    links = "\n".join(
        f'<li><a href="{page_path(j)}">Item {j}</a></li>' for j in page_links(i, pages)
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{title}</title></head>\n<body>\n<h1>{title}</h1>\n"
        f'<div class="description"><p>{text}</p></div>\n'
        f'<div class="price">{(i * 37) % 1000}.99</div>\n'
        f'<ul class="related">\n{links}\n</ul>\n</body></html>\n'
    ).encode()


def response(status: str, body: bytes, ctype: bytes = b"text/html; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nServer: bench-site\r\nContent-Type: {ctype.decode()}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Site:
    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.hits = 0
        self.responses = {
            page_path(i).encode(): response("200 OK", page_html(i, pages)) for i in range(pages)
        }
        self.not_found = response("404 Not Found", b"not found")

    def respond(self, path: bytes) -> bytes:
        found = self.responses.get(path)
        if found is not None:
            self.hits += 1
            return found
        if path == b"/__stats":
            body = json.dumps({"hits": self.hits, "pid": os.getpid()}).encode()
            return response("200 OK", body, b"application/json")
        if path == b"/__reset":
            self.hits = 0
            return response("200 OK", b"{}", b"application/json")
        self.hits += 1
        return self.not_found


class HttpProtocol(asyncio.Protocol):
    def __init__(self, site: Site) -> None:
        self.site = site
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            line = head.split(b"\r\n", 1)[0].split(b" ")
            path = line[1].split(b"?", 1)[0] if len(line) > 1 else b"/"
            out.append(self.site.respond(path))
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(pages: int, port: int) -> None:
    site = Site(pages)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpProtocol(site), "127.0.0.1", port, backlog=512)
    await serve_until_signalled(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.pages, args.port))


if __name__ == "__main__":
    sys.exit(main())
