"""Peak RSS of one worker given one huge start message (REDIS_START_URLS_MAX_SIZE).

One ``scrapy crawl myspider_redis`` of example-project, on a redis-server of its own,
reads one 50 MB start message (a URL, or a JSON object with a big ``meta``) and stops
after 2 idle seconds; ``/usr/bin/time -v`` reports its peak RSS. Run it with the
default limit (the message is set aside before it is decoded) and with
``-s REDIS_START_URLS_MAX_SIZE=0`` (no limit: what workers did before the setting)::

    python benchmarks/start_message_rss.py
    python benchmarks/start_message_rss.py -s REDIS_START_URLS_MAX_SIZE=0
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from _util import ROOT, Redis

SIZE = 50 * 1024 * 1024


def message(kind: str) -> str:
    big = "x" * SIZE
    if kind == "url":
        return f"http://127.0.0.1:9/?q={big}"
    return json.dumps({"url": "http://127.0.0.1:9/", "meta": {"x": big}})


def peak_rss_mb(server: Redis, kind: str, options: list[str]) -> tuple[int, str]:
    server.flush()
    server.command("RPUSH", "myspider:start_urls", message(kind))
    command = ["nice", "/usr/bin/time", "-v", sys.executable, "-m", "scrapy", "crawl",
               "myspider_redis", "-s", "MAX_IDLE_TIME_BEFORE_CLOSE=2", "-s",
               "TELNETCONSOLE_ENABLED=0", *options]  # fmt: skip
    env = {**os.environ, "REDIS_URL": server.url}
    done = subprocess.run(
        command, cwd=ROOT / "example-project", env=env, capture_output=True, text=True
    )
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    invalid = re.search(r"'redis/start_messages/invalid': (\d+)", done.stderr)
    return int(found.group(1)) // 1024 if found else -1, invalid.group(1) if invalid else "0"


def main() -> None:
    options = sys.argv[1:]
    server = Redis()
    try:
        for kind in ("url", "json"):
            rss, invalid = peak_rss_mb(server, kind, options)
            print(f"{kind} message, {options}: peak RSS {rss:,} MB, set aside {invalid}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
