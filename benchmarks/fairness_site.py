"""The sites of the fairness benchmark: one big site and many small ones, each on a
loopback address of its own (127.0.0.2, 127.0.0.3, ...), one port, one asyncio process,
logging each request's arrival time per site (the kernel's receive time: SO_TIMESTAMPNS).

Site 0 (the big one) has ``--big-pages`` pages, sites 1 .. ``--small-sites`` have
``--small-pages`` each. Page 0 of a site is ``/``, page ``i`` is ``/p/<i>.html`` and
links to the next pages of its site, ``3i+1 .. 3i+3`` (a tree: every page is reachable
from ``/``), and back to its parent (a duplicate the dupefilter drops). Scrapy
sees one download slot per address. ``127.0.0.1:<port>`` answers ``/__stats`` (pages
served so far); on SIGTERM the server writes every arrival to ``--out`` (JSON:
``{"arrivals": [[CLOCK_MONOTONIC seconds, site, page, connection, nth], ...]}``: the clock
every process of the machine shares; the connection's number, and the request's rank on
it, 1 for the first request of a new connection) and exits. Run by benchmarks/fairness.py::

    python benchmarks/fairness_site.py --big-pages 500 --small-sites 50 --small-pages 10 \
        --out /tmp/arrivals.json     # prints READY <port> once listening
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import signal
import socket
import struct
import sys
import time
from pathlib import Path

FANOUT = 3


def site_addresses(sites: int) -> list[str]:
    """``sites`` loopback addresses from 127.0.0.2 on, skipping those ending in .0 or .255."""
    found: list[str] = []
    address = ipaddress.IPv4Address("127.0.0.2")
    while len(found) < sites:
        if str(address).rsplit(".", 1)[1] not in ("0", "255"):
            found.append(str(address))
        address += 1
    return found


def page_path(i: int) -> str:
    return "/" if i == 0 else f"/p/{i}.html"


def page_links(i: int, pages: int) -> list[int]:
    """The next pages of the site, then the parent (already seen) unless it is ``/``: the
    start request of ``/`` is not recorded by the dupefilter (Scrapy's start requests have
    ``dont_filter``), so a link to it would fetch it twice."""
    children = [j for j in range(FANOUT * i + 1, FANOUT * i + FANOUT + 1) if j < pages]
    parent = (i - 1) // FANOUT
    return [*children, parent] if parent > 0 else children


def page_response(i: int, pages: int) -> bytes:
    links = "".join(f'<li><a href="{page_path(j)}">page {j}</a></li>' for j in page_links(i, pages))
    body = f"<!DOCTYPE html><html><body><h1>page {i}</h1><ul>{links}</ul></body></html>".encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def json_response(data: object) -> bytes:
    body = json.dumps(data).encode()
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class Sites:
    """The pages of every site, rendered once, and the arrival log."""

    def __init__(self, sizes: list[int]) -> None:
        self.addresses = site_addresses(len(sizes))
        self.index = {address: n for n, address in enumerate(self.addresses)}
        self.pages = [
            {page_path(i).encode(): (i, page_response(i, size)) for i in range(size)}
            for size in sizes
        ]
        self.arrivals: list[tuple[float, int, int, int, int]] = []
        self.connections = 0

    def respond(self, address: str, path: bytes, connection: int, nth: int, at: float) -> bytes:
        """The answer to ``path`` on ``address``; a page's arrival logged at ``at``."""
        site = self.index.get(address)
        if site is None:  # 127.0.0.1: control
            return (
                json_response({"served": len(self.arrivals)}) if path == b"/__stats" else NOT_FOUND
            )
        found = self.pages[site].get(path)
        self.arrivals.append((at, site, found[0] if found else -1, connection, nth))
        return found[1] if found else NOT_FOUND


#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS; Python does not name it): the kernel's
#: receive time of the bytes each recvmsg() returns, a struct timespec (CLOCK_REALTIME).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("@ll")
ANCILLARY = socket.CMSG_SPACE(TIMESPEC.size)


def kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    """The kernel's receive time in ``ancillary`` on the time.monotonic() timeline (this
    process may read the bytes tens of ms later when the machine is loaded)."""
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = TIMESPEC.unpack(value[: TIMESPEC.size])
            return seconds + nanoseconds / 1e9 - (time.time() - time.monotonic())
    return time.monotonic()  # (none: the socket was set up after the bytes came)


class HttpConnection:
    """HTTP/1.1 with keep-alive, GET only, answered in order; each request's arrival is
    the kernel's receive time of its first bytes (Scrapy does not pipeline)."""

    def __init__(self, sites: Sites, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sites, self.sock, self.loop = sites, sock, loop
        self.buffer = b""
        self.pending = b""  # answers the socket did not take yet
        self.address = sock.getsockname()[0]
        self.requests = 0
        sites.connections += 1
        self.number = sites.connections
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        loop.add_reader(sock, self.readable)

    def readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, ANCILLARY)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        at = kernel_time(ancillary)
        self.buffer += data
        out = []
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            line = head.split(b"\r\n", 1)[0].split(b" ")
            path = line[1].split(b"?", 1)[0] if len(line) > 1 else b"/"
            self.requests += 1
            out.append(self.sites.respond(self.address, path, self.number, self.requests, at))
        self.send(b"".join(out))

    def send(self, data: bytes) -> None:
        self.pending += data
        try:
            sent = self.sock.send(self.pending) if self.pending else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self.close()
            return
        self.pending = self.pending[sent:]
        if self.pending:
            self.loop.add_writer(self.sock, self.send, b"")
        else:
            self.loop.remove_writer(self.sock)

    def close(self) -> None:
        self.loop.remove_reader(self.sock)
        self.loop.remove_writer(self.sock)
        self.sock.close()


def accept(sites: Sites, listener: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
    try:
        sock, _ = listener.accept()
    except BlockingIOError:
        return
    HttpConnection(sites, sock, loop)


def bound_sockets(addresses: list[str]) -> list[socket.socket]:
    """Listening sockets on one port free on every address (and 127.0.0.1)."""
    for _ in range(50):
        sockets: list[socket.socket] = []
        try:
            port = 0
            for address in ["127.0.0.1", *addresses]:
                sock = socket.socket()
                sockets.append(sock)
                sock.bind((address, port))
                sock.listen(512)
                port = sock.getsockname()[1]
            return sockets
        except OSError:
            for sock in sockets:
                sock.close()
    raise RuntimeError("no port free on every address")


async def serve(sizes: list[int], out: Path) -> None:
    sites = Sites(sizes)
    loop = asyncio.get_running_loop()
    listeners = bound_sockets(sites.addresses)
    for listener in listeners:
        # (accepted sockets inherit it: a request sent with the connection is stamped)
        listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        listener.setblocking(False)
        loop.add_reader(listener, accept, sites, listener, loop)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {listeners[0].getsockname()[1]}", flush=True)
    await stop.wait()
    for listener in listeners:
        loop.remove_reader(listener)
        listener.close()
    out.write_text(json.dumps({"addresses": sites.addresses, "arrivals": sites.arrivals}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-pages", type=int, default=5000)
    parser.add_argument("--small-sites", type=int, default=100)
    parser.add_argument("--small-pages", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sizes = [args.big_pages] + [args.small_pages] * args.small_sites
    asyncio.run(serve(sizes, args.out))


if __name__ == "__main__":
    sys.exit(main())
