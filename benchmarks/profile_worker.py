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

import run
from _util import HERE, Redis, Site
from run import LOGS, RESULTS, original_python, package_env, snapshot_ours, worker_command

TOOLS = HERE / ".venv-tools"


def py_spy() -> Path:
    binary = TOOLS / "bin" / "py-spy"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(TOOLS)], check=True)
        subprocess.run([str(TOOLS / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", "py-spy"], check=True)
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
    if head in ("scrapy", "twisted", "redis", "parsel", "lxml", "w3lib", "asyncio",
                "pydispatch", "cssselect", "queuelib", "zope"):
        return head
    return "stdlib" if path.endswith(".py") and "/" not in path else head


def summarize(raw: Path, title: str) -> str:  # noqa: C901
    total = 0
    categories: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    ours_entry: Counter[str] = Counter()
    ours_wait: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first element names the thread
        if any(f.startswith("Thread._bootstrap") for f in frames[:1]) or not frames:
            continue  # a worker thread (DNS, pipelines): not the reactor
        count = int(count_text)
        total += count
        leaf_name, leaf_path = frame_parts(frames[-1])
        waiting_redis = leaf_path.startswith(("redis/", "/")) and "/redis/" in f"/{leaf_path}" \
            and leaf_name.rpartition(".")[2] in ("_read_from_socket", "recv")
        sending_redis = leaf_name.endswith("send_packed_command") and "redis/" in leaf_path
        if leaf_name == "select" and leaf_path.endswith("selectors.py"):
            category = "idle: reactor waiting for I/O (select)"
        elif waiting_redis:
            category = "blocked: waiting for a Redis reply (synchronous call)"
        elif sending_redis:
            category = "Redis socket: sending a command (sendall, loopback)"
        else:
            category = f"CPU: {package_of(leaf_path)}"
        categories[category] += count
        self_time[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
        entry = next((f for f in frames if "scrapy_redis" in frame_parts(f)[1]), None)
        if entry is not None:
            ours_entry[frame_parts(entry)[0]] += count
            if waiting_redis or sending_redis:
                ours_wait[frame_parts(entry)[0]] += count
    if not total:
        return f"# {title}\n\nno samples\n"
    pct = lambda n: f"{100 * n / total:.1f}%"  # noqa: E731
    lines = [f"# {title}", "", f"{total} samples of the main (reactor) thread.", "",
             "## Where the time goes", "", "| category | share |", "|---|---|"]
    lines += [f"| {name} | {pct(n)} |" for name, n in categories.most_common(14)]
    lines += ["", "## scrapy_redis entry points (inclusive; of which in Redis socket I/O)", "",
              "| function | share | sending to / waiting for Redis |", "|---|---|---|"]
    lines += [f"| {name} | {pct(n)} | {pct(ours_wait[name])} |"
              for name, n in ours_entry.most_common(10)]
    lines += ["", "## Top functions, self", "", "| function | share |", "|---|---|"]
    lines += [f"| `{name}` | {pct(n)} |" for name, n in self_time.most_common(20)]
    lines += ["", "## Top functions, inclusive (below the event loop)", "",
              "| function | share |", "|---|---|"]
    loop_frames = ("run_forever", "_run_once", "_run (asyncio/events.py", "<module>",
                   "execute (scrapy/cmdline", "run (", "_run_command", "start (scrapy/crawler",
                   "_run_print_help", "run_module", "_run_code", "_start_twisted", "Context.run")
    shown = 0
    for name, n in inclusive.most_common():
        if any(marker in name for marker in loop_frames):
            continue
        lines.append(f"| `{name}` | {pct(n)} |")
        shown += 1
        if shown == 25:
            break
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--package", choices=["ours", "ours-unleased", "original"],
                        default="ours")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    args = parser.parse_args()
    LOGS.mkdir(parents=True, exist_ok=True)
    spy = py_spy()
    original = original_python()
    source = snapshot_ours(run.ROOT / "src")
    raw = RESULTS / f"profile-{args.package}.txt"
    redis, site = Redis(), Site(args.pages)
    try:
        command = worker_command(args.package, original, site, redis.url,
                                 LOGS / f"profile-{args.package}-w1.json")
        with open(LOGS / f"profile-{args.package}-w1.log", "wb") as logfile:
            subprocess.run(
                [str(spy), "record", "--idle", "--threads", "--nonblocking", "--rate",
                 str(args.rate), "--format", "raw", "--output", str(raw), "--", *command],
                stdout=logfile, stderr=subprocess.STDOUT, env=package_env(args.package),
                cwd=tempfile.mkdtemp(prefix="bench-worker-"), check=True,
            )
        pages = site.hits()
    finally:
        site.stop()
        redis.stop()
        shutil.rmtree(run.OURS_SRC, ignore_errors=True)
    version = source if args.package != "original" else "scrapy-redis 0.9.1"
    text = summarize(raw, f"py-spy profile of one {args.package} worker crawling "
                          f"{pages} pages (PriorityQueue); {version}")
    (RESULTS / f"profile-{args.package}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
