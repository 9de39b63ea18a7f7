"""A real dashboard (``scrapy redis dashboard``, or ``python -m scrapy_redis.dashboard``)
run in example-project, and HTTP requests to it with the standard library."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[1] / "example-project"
LISTENING = re.compile(r"Dashboard: (http://\S+/)")


#: How users start it: the ``scrapy redis`` verb, or the module.
VERB = ["-m", "scrapy", "redis", "dashboard"]
MODULE = ["-m", "scrapy_redis.dashboard"]


class DashboardProcess:
    """``scrapy redis dashboard --port 0 *args`` (``entry``: MODULE for ``python -m
    scrapy_redis.dashboard``) against ``redis_url``; ``--port 0`` unless a port is given."""

    def __init__(
        self,
        redis_url: str,
        *args: str,
        env: dict[str, str] | None = None,
        entry: list[str] = VERB,
    ) -> None:
        port = [] if any("PORT" in arg.upper() for arg in args) else ["--port", "0"]
        self.command = [sys.executable, *entry, *port, *args]
        self.env = {**os.environ, "REDIS_URL": redis_url, **(env or {})}
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.url = ""

    def start(self, timeout: float = 30) -> DashboardProcess:
        self.process = subprocess.Popen(
            self.command, cwd=EXAMPLE, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        while not self.url:
            line = self.lines.get(timeout=timeout)
            assert line, f"the dashboard exited: {''.join(self.output)}"
            match = LISTENING.search(line)
            self.url = match.group(1) if match else ""
        return self

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put("")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass
class Reply:
    status: int
    headers: Any
    body: bytes
    cookies: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def http(
    url: str, method: str = "GET", data: Any = None, headers: dict[str, str] | None = None
) -> Reply:
    """One request with urllib (no redirect followed); ``data``: a dict is sent as JSON,
    bytes as they are."""
    headers = dict(headers or {})
    body = data
    if isinstance(data, dict):
        body = json.dumps(data).encode()
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with _OPENER.open(request, timeout=30) as response:
            reply = Reply(response.status, response.headers, response.read())
    except urllib.error.HTTPError as error:
        reply = Reply(error.code, error.headers, error.read())
    for header in reply.headers.get_all("Set-Cookie") or []:
        name, _, rest = header.partition("=")
        reply.cookies[name] = rest.split(";", 1)[0]
    return reply


def cookie_name(url: str) -> str:
    """The name of the session cookie of the dashboard at ``url`` (it ends with its port)."""
    return f"scrapy_redis_dashboard_{urllib.parse.urlsplit(url).port}"


def csrf_token(page: str) -> str:
    """The CSRF token in the dashboard's page."""
    match = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page)
    assert match, "no CSRF token in the page"
    return match.group(1)
