"""A TCP proxy on loopback, in front of a test redis-server, that loses one reply on demand.

``proxy.lose_next_reply()`` makes the proxy forward the next command a client
sends (connection set-up commands aside) to the server, which runs it, and then
lose the server's reply (``times=2``: the reply to the command sent again too).
``how="drop"`` closes the client's connection instead (redis-py sees a
``ConnectionError``), ``how="stall"`` holds the reply back, so the client waits
for its ``socket_timeout`` (a ``TimeoutError``). Either way redis-py's retry
sends the command again, as it would after a network blip or a
stall of the server longer than ``socket_timeout``.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from redis_server import free_port

# Commands redis-py sends when it (re)connects: never the one whose reply is lost.
_SETUP = (b"CLIENT", b"HELLO", b"PING", b"SELECT", b"AUTH", b"READONLY")


def _command_name(data: bytes) -> bytes:
    """The name of the first command of a RESP request (``*n\\r\\n$len\\r\\nNAME``)."""
    parts = data.split(b"\r\n", 3)
    return parts[2].upper() if len(parts) > 2 else b""


class LossyProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``; loses one reply when asked."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.lost: list[bytes] = []  # the names of the commands whose reply was lost
        self._armed: list[str] = []  # how the next replies are lost
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_next_reply(self, how: str = "drop", times: int = 1) -> None:
        assert how in ("drop", "stall")
        self._armed += [how] * times

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, upstream]
            losing: list[str] = []  # how this connection loses its next reply, if it does
            threading.Thread(
                target=self._requests, args=(client, upstream, losing), daemon=True
            ).start()
            threading.Thread(
                target=self._replies, args=(upstream, client, losing), daemon=True
            ).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, losing: list[str]) -> None:
        while data := _recv(client):
            name = _command_name(data)
            with self._lock:
                if self._armed and name not in _SETUP:
                    losing.append(self._armed.pop(0))
                    self.lost.append(name)
            if not _send(upstream, data):
                break
        _close(upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket, losing: list[str]) -> None:
        while data := _recv(upstream):
            if not losing:
                if not _send(client, data):
                    break
            elif losing[0] == "drop":
                break
            # "stall": the reply is held back for good; the client gives up and reconnects
        _close(client)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    """Whether ``data`` was sent (the other side, or the test, may have closed ``sock``)."""
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
