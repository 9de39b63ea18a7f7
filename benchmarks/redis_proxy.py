"""A counting TCP proxy between Redis clients and a redis-server (loopback only).

It counts, over all client connections:

* ``round_trips``: client-to-server request batches. A batch starts when the
  client sends data while it has received every reply it asked for so far (a
  reply from the server arrived since its previous batch, or nothing was sent
  yet on that connection); everything the client sends before the next reply
  belongs to the same batch. One command, one pipeline (with or without
  MULTI/EXEC) or one EVALSHA script call is one round trip, whatever the script
  runs inside Redis.
* ``commands``: RESP arrays (commands) sent by clients, and ``by_command``, the
  same per command name (EVALSHA counts once; the calls inside a script are not
  seen by the proxy); ``by_script``: EVALSHA calls per script, by the first 12 hex
  digits of its SHA1 (``scrapy_redis.store.scripts`` names them: :func:`script_names`).
* ``connections``: client connections accepted.
* ``held``: with ``--delay-ms``, per direction (``to_server``, ``to_client``), how long
  the chunks were really held, from their read to their write (ms: mean, max, count):
  on a loaded machine the proxy wakes up late, so "1 ms" may be more.

``--delay-ms D`` holds every chunk D milliseconds in each direction before passing it on
(in order, without limiting throughput): a network with a round trip of 2·D ms
(``--delay-ms 0.5``: 1 ms, a Redis on another host of the same data centre). Its
event loop waits with select(), whose timeouts are finer than a millisecond: with
epoll (asyncio's default) a chunk held 0.5 ms went out after 1–1.2 ms, 2.2 ms more
per round trip instead of 1 (``benchmarks/proxy_delay.py`` measures it: now about
1.2 ms). Latency results before 2026-11-26 14:00 were measured that way.

``python benchmarks/redis_proxy.py --target-port 6390 --stats-file out.json``
prints ``READY <port>``; on SIGTERM it writes the counts to ``--stats-file``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import selectors
from collections import Counter
from collections.abc import Callable
from functools import partial

from _serve import serve_until_signalled


class Counts:
    def __init__(self) -> None:
        self.round_trips = 0
        self.commands = 0
        self.connections = 0
        self.by_command: Counter[str] = Counter()
        self.by_script: Counter[str] = Counter()
        #: direction -> [sum of the holds (s), chunks, longest hold (s)]
        self.held: dict[str, list[float]] = {}

    def hold(self, direction: str, seconds: float) -> None:
        total = self.held.setdefault(direction, [0.0, 0, 0.0])
        total[0] += seconds
        total[1] += 1
        total[2] = max(total[2], seconds)

    def as_dict(self) -> dict[str, object]:
        return {
            "round_trips": self.round_trips,
            "commands": self.commands,
            "connections": self.connections,
            "by_command": dict(self.by_command.most_common()),
            "by_script": dict(self.by_script.most_common()),
            "held": {
                direction: {
                    "mean_ms": round(total / max(1, count) * 1000, 3),
                    "max_ms": round(longest * 1000, 3),
                    "chunks": int(count),
                }
                for direction, (total, count, longest) in self.held.items()
            },
        }


class RespCounter:
    """Counts complete RESP arrays in a client's byte stream (fed in arbitrary chunks)."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data
        pos = 0
        buf = self.buffer
        while True:
            parsed = self._parse_command(buf, pos)
            if parsed is None:
                break
            pos, name, sha = parsed
            self.counts.commands += 1
            self.counts.by_command[name] += 1
            if name == "EVALSHA":
                self.counts.by_script[sha] += 1
        del buf[:pos]

    @staticmethod
    def _parse_command(buf: bytearray, pos: int) -> tuple[int, str, str] | None:
        """(end position, command name, the first 12 characters of its first argument)
        of the command at ``pos``, or None if incomplete."""
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None
        if buf[pos : pos + 1] != b"*":  # an inline command: one line
            name = bytes(buf[pos:end]).split(b" ", 1)[0].decode(errors="replace").upper()
            return end + 2, name, ""
        elements = int(buf[pos + 1 : end])
        pos = end + 2
        name = first = ""
        for index in range(elements):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            length = int(buf[pos + 1 : end])
            start = end + 2
            if len(buf) < start + length + 2:
                return None
            if index == 0:
                name = bytes(buf[start : start + length]).decode(errors="replace").upper()
            elif index == 1:
                first = bytes(buf[start : start + min(length, 12)]).decode(errors="replace")
            pos = start + length + 2
        return pos, name, first


async def pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    on_data: Callable[[bytes], None],
    delay: float = 0.0,
    on_held: Callable[[float], None] = lambda seconds: None,
) -> None:
    """Copy ``reader`` to ``writer`` until either side closes, calling ``on_data`` first
    on each chunk, each chunk ``delay`` seconds after it was read (``on_held``: told how
    long it really was); closes ``writer``."""
    if delay <= 0:
        try:
            while data := await reader.read(65536):
                on_data(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
        return
    loop = asyncio.get_running_loop()
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    sender = asyncio.create_task(_send_when_due(held, writer, delay, on_held))
    try:
        while data := await reader.read(65536):
            on_data(data)
            held.put_nowait((loop.time() + delay, data))
    except (ConnectionError, OSError):
        pass
    finally:
        held.put_nowait((loop.time() + delay, b""))  # then close
        await sender


async def _send_when_due(
    held: asyncio.Queue[tuple[float, bytes]],
    writer: asyncio.StreamWriter,
    delay: float,
    on_held: Callable[[float], None],
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            due, data = await held.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                return
            writer.write(data)
            on_held(loop.time() - due + delay)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def handle(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    target_port: int,
    counts: Counts,
    delay: float = 0.0,
) -> None:
    counts.connections += 1
    server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
    state = {"awaiting_reply": False}
    parser = RespCounter(counts)

    def replied(data: bytes) -> None:
        state["awaiting_reply"] = False

    def sent(data: bytes) -> None:
        if not state["awaiting_reply"]:  # the first bytes sent since the last reply
            counts.round_trips += 1
            state["awaiting_reply"] = True
        parser.feed(data)

    back = asyncio.create_task(
        pipe(server_reader, client_writer, replied, delay, partial(counts.hold, "to_client"))
    )
    await pipe(client_reader, server_writer, sent, delay, partial(counts.hold, "to_server"))
    await back


async def serve(target_port: int, stats_file: str, delay: float = 0.0, port: int = 0) -> None:
    counts = Counts()
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, target_port, counts, delay), "127.0.0.1", port
    )
    await serve_until_signalled(server)
    with open(stats_file, "w") as f:
        json.dump(counts.as_dict(), f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--stats-file", required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="each way")
    parser.add_argument("--port", type=int, default=0, help="to listen on (0: a free one)")
    args = parser.parse_args()
    # select(), not epoll: epoll waits whole milliseconds, rounded up, so a chunk held
    # 0.5 ms went out after 1-1.2 ms (2.2 ms per round trip for --delay-ms 0.5).
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(
            serve(args.target_port, args.stats_file, args.delay_ms / 1000, args.port)
        )
    finally:
        loop.close()


if __name__ == "__main__":
    main()


def script_names() -> dict[str, str]:
    """The first 12 hex digits of the SHA1 of each script of scrapy_redis.store.lua (as
    ``by_script`` counts them) -> the script's name."""
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    sys.path.insert(0, str(src))
    from scrapy_redis.store.scripts import script

    lua = sorted((src / "scrapy_redis" / "store" / "lua").glob("[!_]*.lua"))
    return {script(path.stem).sha[:12]: path.stem for path in lua}
