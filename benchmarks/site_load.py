"""Raw throughput of the benchmark site: a simple concurrent keep-alive HTTP client.

``python benchmarks/site_load.py --port P --pages N --connections 32 --requests 20000``
prints one JSON line: requests, seconds, requests per second. The client is
plain asyncio (Python, like the site), so the number is a lower bound of what
the site can serve.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from site_server import page_path


async def client(port: int, paths: list[str], count: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    try:
        for k in range(count):
            path = paths[k % len(paths)]
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            done += 1
    finally:
        writer.close()
    return done


async def run(port: int, pages: int, connections: int, requests: int) -> dict[str, float]:
    rng = random.Random(1)
    per_client = requests // connections
    start = time.perf_counter()
    counts = await asyncio.gather(
        *(
            client(port, [page_path(rng.randrange(pages)) for _ in range(200)], per_client)
            for _ in range(connections)
        )
    )
    elapsed = time.perf_counter() - start
    total = sum(counts)
    return {"requests": total, "seconds": elapsed, "rps": total / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pages", type=int, required=True)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    result = asyncio.run(run(args.port, args.pages, args.connections, args.requests))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
