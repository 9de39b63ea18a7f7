"""The test sites of polite_site.py log when a request reached them, as the kernel saw it:
the gaps the politeness tests check are not the gaps a late handler thread saw."""

from __future__ import annotations

import socket
import time

from polite_site import PoliteSites

ADDRESS = "127.0.0.2"
HOLD = 0.5


def exchange(client: socket.socket, held: PoliteSites | None = None) -> float:
    """Sends a request on ``client`` (keep-alive), lets the site's handler thread wait
    ``HOLD`` seconds before it reads it if ``held``, reads the answer; returns when it
    was sent (time.time())."""
    sent = time.time()
    client.sendall(f"GET / HTTP/1.1\r\nHost: {ADDRESS}\r\n\r\n".encode())
    if held is not None:
        while time.time() < sent + HOLD:  # the handler thread is late by HOLD
            time.sleep(0.01)
        held.open.set()
    answer = b""
    while b"</html>" not in answer:
        chunk = client.recv(65536)
        assert chunk, "the site closed the connection"
        answer += chunk
    return sent


def test_an_arrival_is_the_kernels_time_not_the_handler_threads():
    with PoliteSites([ADDRESS], pages=1) as sites:
        sites.open.clear()  # the handler thread waits before it reads a request
        with socket.create_connection((ADDRESS, sites.port), timeout=30) as client:
            first = exchange(client, held=sites)
            time.sleep(0.05)  # (the second request a little later, on the same connection)
            sites.open.clear()
            second = exchange(client, held=sites)
    wall = sites.wall[ADDRESS]
    assert len(wall) == 2
    # stamped when sent (on loopback the kernel stamps it in the sender's write), not
    # HOLD later when the handler thread read it
    assert first - 0.001 <= wall[0] < first + HOLD / 2, wall[0] - first
    assert second - 0.001 <= wall[1] < second + HOLD / 2, wall[1] - second
    # the same on the time.monotonic() timeline
    (at0, _), (at1, _) = sites.arrivals[ADDRESS]
    assert abs((at1 - at0) - (wall[1] - wall[0])) < 0.001
