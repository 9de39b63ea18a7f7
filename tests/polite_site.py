"""Several small sites on loopback addresses (127.0.0.2, 127.0.0.3, ...), one port: each
request's arrival time is logged per site, with how many of its requests were in flight.

The arrival time is the kernel's: when the request's first bytes reached the socket
(``SO_TIMESTAMPNS``, read with a ``MSG_PEEK`` before each request of a keep-alive
connection; Scrapy does not pipeline), not when a handler thread of this process got
round to it, tens of milliseconds later on a loaded machine. ``arrivals`` holds it on
the ``time.monotonic()`` timeline, ``wall`` on the kernel's (``time.time()``).

Scrapy sees one download slot per address. Each site has a listing page ``/`` linking
to ``/p/0.html`` ... ``/p/<pages - 1>.html`` (no other links); a page may take
``latency`` seconds to answer (slow pages, to see the downloads in flight), a file
``/f/<anything>`` answers its path (a page's file, for a media pipeline), and a
page named in ``retry_after`` answers 429 with that ``Retry-After`` once; a site
named in ``robots`` serves that ``/robots.txt``, in ``robots_latency`` seconds
(requests for it are not counted in ``paths``, ``times``, ``gaps`` and ``rate``). Used by
tests/test_politeness_e2e.py and benchmarks/politeness.py::

    with PoliteSites(["127.0.0.2", "127.0.0.3"], pages=20) as sites:
        sites.urls  # the listing pages, to push as start URLs
        sites.arrivals["127.0.0.2"]  # [(monotonic time, path), ...]
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from bisect import insort
from collections import defaultdict
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS; Python does not name it): the receive
#: time of each packet, as a struct timespec (CLOCK_REALTIME) in the ancillary data.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("@ll")


def kernel_arrival(connection: socket.socket) -> float | None:
    """When the next bytes waiting on ``connection`` reached it (``time.time()``
    seconds, the kernel's stamp); None once the peer closed it. Waits for them."""
    data, ancillary, _, _ = connection.recvmsg(1, socket.CMSG_SPACE(TIMESPEC.size), socket.MSG_PEEK)
    if not data:
        return None
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = TIMESPEC.unpack(value[: TIMESPEC.size])
            return seconds + nanoseconds / 1e9
    raise RuntimeError("no SCM_TIMESTAMPNS on a socket with SO_TIMESTAMPNS set")


def wait_for_kernel_stamps(timeout: float = 30) -> None:
    """Until the kernel stamps what reaches a socket with SO_TIMESTAMPNS. Linux turns its
    stamping on for the whole system when the first socket asks for it, but later, from a
    deferred work item (a loaded machine: tens of ms, more): until then a request comes
    with no stamp, which :func:`kernel_arrival` cannot read. Called while the sites'
    sockets (which keep the stamping on) are open."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            with socket.create_connection(listener.getsockname(), timeout=timeout) as client:
                accepted, _ = listener.accept()
                with accepted:
                    client.sendall(b"?")
                    _, ancillary, _, _ = accepted.recvmsg(1, socket.CMSG_SPACE(TIMESPEC.size))
        if any(kind == SO_TIMESTAMPNS for _, kind, _ in ancillary):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the kernel never stamped a packet (SO_TIMESTAMPNS)")
        time.sleep(0.01)


def free_port(addresses: Sequence[str]) -> int:
    """A port free on every address."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for address in addresses[1:]:
                with socket.socket() as other:
                    other.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on every address")


class PoliteSites:
    """The sites; ``arrivals`` and ``max_in_flight`` per address."""

    def __init__(
        self, addresses: Sequence[str] = ADDRESSES, pages: int = 20, latency: float = 0.0
    ) -> None:
        self.addresses = list(addresses)
        self.pages = pages
        self.latency = latency
        #: (address, path) -> seconds: answered once 429 with that Retry-After.
        self.retry_after: dict[tuple[str, str], float] = {}
        #: address -> its /robots.txt (else a 404).
        self.robots: dict[str, str] = {}
        #: Seconds /robots.txt takes to answer (a slow site).
        self.robots_latency = 0.0
        self.port = free_port(self.addresses)
        self.lock = threading.Lock()
        self.arrivals: dict[str, list[tuple[float, str]]] = defaultdict(list)
        #: address -> the kernel's arrival times (time.time() seconds), as in arrivals.
        self.wall: dict[str, list[float]] = defaultdict(list)
        #: address -> (kernel's arrival time, the client's port): a new port, a new connection.
        self.ports: dict[str, list[tuple[float, int]]] = defaultdict(list)
        #: Cleared: the handler threads wait before reading a request (its arrival
        #: time is still the kernel's).
        self.open = threading.Event()
        self.open.set()
        self.in_flight: dict[str, int] = defaultdict(int)
        self.max_in_flight: dict[str, int] = defaultdict(int)
        self.servers = [self._server(address) for address in self.addresses]
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in self.servers]

    @property
    def urls(self) -> list[str]:
        return [f"http://{address}:{self.port}/" for address in self.addresses]

    def _server(self, address: str) -> ThreadingHTTPServer:
        sites = self
        links = "".join(f'<a href="/p/{i}.html">page {i}</a>' for i in range(self.pages))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as most sites
            received: float | None = None

            def setup(self) -> None:
                self.request.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                super().setup()

            def handle_one_request(self) -> None:
                sites.open.wait()
                self.received = kernel_arrival(self.connection)
                if self.received is None:
                    self.close_connection = True
                    return
                super().handle_one_request()

            def do_GET(self) -> None:
                assert self.received is not None
                sites.arrived(address, self.path, self.received, self.client_address[1])
                try:
                    wait = sites.retry_after.pop((address, self.path), None)
                    if wait is not None:
                        self.send_response(429)
                        self.send_header("Retry-After", str(wait))
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    latency = sites.robots_latency if self.path == "/robots.txt" else sites.latency
                    if latency:
                        time.sleep(latency)
                    body = f"<html><body>{links if self.path == '/' else self.path}</body></html>"
                    if self.path == "/robots.txt" and address in sites.robots:
                        body = sites.robots[address]
                    data = body.encode()
                    found = self.path in ("/", "/robots.txt")
                    found = found or self.path.startswith(("/p/", "/f/"))
                    self.send_response(200 if found else 404)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    sites.left(address)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer((address, self.port), Handler)
        # on the listening socket too: the accepted ones inherit it, and a request that
        # came before setup() is stamped (the kernel stamps packets once a socket asks)
        server.socket.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        server.daemon_threads = True
        return server

    def arrived(self, address: str, path: str, wall: float, port: int = 0) -> None:
        """A request for ``path`` reached ``address`` at ``wall`` (time.time()), from
        the client's ``port``."""
        monotonic = wall - (time.time() - time.monotonic())
        with self.lock:
            # (in the order they arrived: handler threads may log them in another)
            insort(self.arrivals[address], (monotonic, path))
            insort(self.wall[address], wall)
            insort(self.ports[address], (wall, port))
            self.in_flight[address] += 1
            self.max_in_flight[address] = max(self.max_in_flight[address], self.in_flight[address])

    def left(self, address: str) -> None:
        with self.lock:
            self.in_flight[address] -= 1

    def served(self) -> int:
        with self.lock:
            return sum(len(times) for times in self.arrivals.values())

    def paths(self, address: str) -> list[str]:
        with self.lock:
            return [path for _, path in self.arrivals[address] if path != "/robots.txt"]

    def times(self, address: str) -> list[float]:
        with self.lock:
            return [at for at, path in self.arrivals[address] if path != "/robots.txt"]

    def gaps(self, address: str) -> list[float]:
        """Seconds between consecutive arrivals at one site (robots.txt apart)."""
        times = self.times(address)
        return [b - a for a, b in pairwise(times)]

    def rate(self, address: str) -> float:
        """Requests a second from the first arrival to the last."""
        times = self.times(address)
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0

    def __enter__(self) -> PoliteSites:
        wait_for_kernel_stamps()  # (the listening sockets asked for them: they stay on)
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
