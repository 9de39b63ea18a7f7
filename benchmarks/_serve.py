"""Serving until signalled: what the benchmarks' child servers (site_server.py,
redis_proxy.py) share. Imports no other benchmark module (_util.py starts those servers
and imports site_server.py: a helper here keeps that one-way)."""

from __future__ import annotations

import asyncio
import signal


async def serve_until_signalled(server: asyncio.AbstractServer) -> None:
    """Print ``READY <port>`` (what the parent waits for), serve until SIGTERM or SIGINT,
    then close ``server``."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()
