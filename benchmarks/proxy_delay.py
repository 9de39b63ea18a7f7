"""What redis_proxy.py really adds per round trip: PINGs through it, with and without
``--delay-ms``, to a redis-server of its own. Usage::

    .venv/bin/python benchmarks/proxy_delay.py [--delay-ms 0.5] [--pings 500]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from _util import HERE, Redis, free_port


def ping_times(target_port: int, delay_ms: float, pings: int) -> list[float]:
    """Seconds per PING through a proxy holding each chunk ``delay_ms`` each way."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, str(HERE / "redis_proxy.py"), "--target-port", str(target_port)]
        command += ["--port", str(port), "--delay-ms", str(delay_ms)]
        command += ["--stats-file", str(Path(tmp) / "stats.json")]
        proxy = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            assert proxy.stdout is not None
            proxy.stdout.readline()  # READY <port>
            client = redis.Redis(port=port)
            client.ping()
            times = []
            for _ in range(pings):
                started = time.perf_counter()
                client.ping()
                times.append(time.perf_counter() - started)
            client.close()
            return times
        finally:
            proxy.terminate()
            proxy.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, default=0.5, help="each way")
    parser.add_argument("--pings", type=int, default=500)
    args = parser.parse_args()
    server = Redis()
    try:
        base = statistics.median(ping_times(server.port, 0.0, args.pings))
        held = statistics.median(ping_times(server.port, args.delay_ms, args.pings))
    finally:
        server.stop()
    print(
        f"PING through the proxy: {base * 1e3:.2f} ms; with --delay-ms {args.delay_ms:g}: "
        f"{held * 1e3:.2f} ms (+{(held - base) * 1e3:.2f} ms a round trip, "
        f"{2 * args.delay_ms:g} ms asked)"
    )


if __name__ == "__main__":
    main()
