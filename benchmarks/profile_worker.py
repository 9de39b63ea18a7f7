"""Profile one of OUR workers during the end-to-end crawl (py-spy, sampling).

    python benchmarks/profile_worker.py [--pages 5000] [--package ours|ours-unleased|original]

Installs py-spy into benchmarks/.venv-tools if needed, starts a redis-server
and the benchmark site, and runs one worker (bench_spider.py, our Scheduler,
PriorityQueue) under ``py-spy record --idle --threads --nonblocking``. The raw
(collapsed) stacks go to results/profile-<package>.txt and a summary of the
reactor (main) thread to results/profile-<package>.md and stdout:

* where the main thread's samples go: waiting in the reactor's select (idle),
  blocked in a synchronous Redis call (waiting for the reply), or running
  Python code, split by the package of the innermost frame;
* the functions with the most samples, self and inclusive;
* the scrapy_redis entry points and how much of their time is spent in
  synchronous Redis socket I/O (sendall, or blocked in recv for the reply).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _util import HERE, LOGS, RESULTS, ROOT, Redis, Site
from crawls import worker_command
from original_venv import original_python
from packages import Packages, snapshot_ours

TOOLS = HERE / ".venv-tools"


def py_spy() -> Path:
    binary = TOOLS / "bin" / "py-spy"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TOOLS)], check=True)
        subprocess.run(
            [
                str(TOOLS / "bin" / "pip"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "py-spy",
            ],
            check=True,
        )
    return binary


def frame_parts(frame: str) -> tuple[str, str]:
    """(function, file) of a py-spy frame ``func (path/file.py:123)``."""
    name, _, rest = frame.partition(" (")
    return name, rest.rsplit(":", 1)[0]


def package_of(path: str) -> str:
    if "scrapy_redis" in path:
        return "scrapy_redis"
    for marker, package in (("site-packages/", None), ("/lib/python3", "stdlib")):
        if marker in path:
            if package:
                return package
            return path.split(marker, 1)[1].split("/", 1)[0]
    head = path.split("/", 1)[0]
    if head in (
        "scrapy",
        "twisted",
        "redis",
        "parsel",
        "lxml",
        "w3lib",
        "asyncio",
        "pydispatch",
        "cssselect",
        "queuelib",
        "zope",
    ):
        return head
    return "stdlib" if path.endswith(".py") and "/" not in path else head


#: Frames of the event loop and of start-up, left out of the inclusive list.
LOOP_FRAMES = (
    "run_forever",
    "_run_once",
    "_run (asyncio/events.py",
    "<module>",
    "execute (scrapy/cmdline",
    "run (",
    "_run_command",
    "start (scrapy/crawler",
    "_run_print_help",
    "run_module",
    "_run_code",
    "_start_twisted",
    "Context.run",
)


def category_of(leaf_name: str, leaf_path: str) -> tuple[str, bool]:
    """Where a sample whose innermost frame is ``leaf_name`` (in ``leaf_path``) is:
    (the category, whether it is in Redis socket I/O)."""
    waiting_redis = (
        leaf_path.startswith(("redis/", "/"))
        and "/redis/" in f"/{leaf_path}"
        and leaf_name.rpartition(".")[2] in ("_read_from_socket", "recv")
    )
    sending_redis = leaf_name.endswith("send_packed_command") and "redis/" in leaf_path
    if leaf_name == "select" and leaf_path.endswith("selectors.py"):
        return "idle: reactor waiting for I/O (select)", False
    if waiting_redis:
        return "blocked: waiting for a Redis reply (synchronous call)", True
    if sending_redis:
        return "Redis socket: sending a command (sendall, loopback)", True
    return f"CPU: {package_of(leaf_path)}", False


class Samples:
    """The main (reactor) thread's samples of a raw py-spy file, counted."""

    def __init__(self) -> None:
        self.total = 0
        self.categories: Counter[str] = Counter()
        self.self_time: Counter[str] = Counter()
        self.inclusive: Counter[str] = Counter()
        self.ours_entry: Counter[str] = Counter()
        self.ours_wait: Counter[str] = Counter()

    @classmethod
    def read(cls, raw: Path) -> Samples:
        samples = cls()
        for line in raw.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            frames = stack.split(";")[1:]  # the first element names the thread
            if any(f.startswith("Thread._bootstrap") for f in frames[:1]) or not frames:
                continue  # a worker thread (DNS, pipelines): not the reactor
            samples.add(frames, int(count_text))
        return samples

    def add(self, frames: list[str], count: int) -> None:
        """``count`` samples of the stack ``frames`` (outermost first)."""
        self.total += count
        category, in_redis_io = category_of(*frame_parts(frames[-1]))
        self.categories[category] += count
        self.self_time[frames[-1]] += count
        for frame in set(frames):
            self.inclusive[frame] += count
        entry = next((f for f in frames if "scrapy_redis" in frame_parts(f)[1]), None)
        if entry is not None:
            self.ours_entry[frame_parts(entry)[0]] += count
            if in_redis_io:
                self.ours_wait[frame_parts(entry)[0]] += count

    def pct(self, n: int) -> str:
        return f"{100 * n / self.total:.1f}%"

    def functions(self, heading: str, counts: list[tuple[str, int]]) -> list[str]:
        """A table of functions and their shares of the samples, under ``heading``."""
        lines = ["", heading, "", "| function | share |", "|---|---|"]
        return lines + [f"| `{name}` | {self.pct(n)} |" for name, n in counts]

    def below_loop(self, limit: int) -> list[tuple[str, int]]:
        """The top inclusive frames, without the event loop's and start-up's."""
        counts = self.inclusive.most_common()
        kept = [(name, n) for name, n in counts if not any(m in name for m in LOOP_FRAMES)]
        return kept[:limit]


def summarize(raw: Path, title: str) -> str:
    """The markdown summary of the raw py-spy file ``raw``."""
    samples = Samples.read(raw)
    if not samples.total:
        return f"# {title}\n\nno samples\n"
    pct = samples.pct
    lines = [f"# {title}", "", f"{samples.total} samples of the main (reactor) thread.", ""]
    lines += ["## Where the time goes", "", "| category | share |", "|---|---|"]
    lines += [f"| {name} | {pct(n)} |" for name, n in samples.categories.most_common(14)]
    lines += [
        "",
        "## scrapy_redis entry points (inclusive; of which in Redis socket I/O)",
        "",
        "| function | share | sending to / waiting for Redis |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {pct(n)} | {pct(samples.ours_wait[name])} |"
        for name, n in samples.ours_entry.most_common(10)
    ]
    top_self = samples.self_time.most_common(20)
    lines += samples.functions("## Top functions, self", top_self)
    heading = "## Top functions, inclusive (below the event loop)"
    lines += samples.functions(heading, samples.below_loop(25))
    return "\n".join(lines) + "\n"


def record(spy: Path, packages: Packages, package: str, pages: int, rate: int) -> int:
    """Crawl a site of ``pages`` with one worker of ``package`` under py-spy; the pages
    crawled. The raw stacks go to results/profile-<package>.txt."""
    raw = RESULTS / f"profile-{package}.txt"
    redis, site = Redis(), Site(pages)
    try:
        report = LOGS / f"profile-{package}-w1.json"
        command = worker_command(packages, package, site, redis.url, report)
        options = ["--idle", "--threads", "--nonblocking", "--rate", str(rate)]
        after = ["--", *command]
        with open(LOGS / f"profile-{package}-w1.log", "wb") as logfile:
            subprocess.run(
                [str(spy), "record", *options, "--format", "raw", "--output", str(raw), *after],
                stdout=logfile,
                stderr=subprocess.STDOUT,
                env=packages.env(package),
                cwd=tempfile.mkdtemp(prefix="bench-worker-"),
                check=True,
            )
        return site.hits()
    finally:
        site.stop()
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--package", choices=["ours", "ours-unleased", "original"], default="ours")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    args = parser.parse_args()
    LOGS.mkdir(parents=True, exist_ok=True)
    spy = py_spy()
    original = original_python()
    ours_src, source = snapshot_ours(ROOT / "src")
    try:
        pages = record(spy, Packages(ours_src, original), args.package, args.pages, args.rate)
    finally:
        shutil.rmtree(ours_src, ignore_errors=True)
    version = source if args.package != "original" else "scrapy-redis 0.9.1"
    title = f"py-spy profile of one {args.package} worker crawling {pages} pages"
    text = summarize(RESULTS / f"profile-{args.package}.txt", f"{title} (PriorityQueue); {version}")
    (RESULTS / f"profile-{args.package}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
