"""The benchmarks: which script to run for what, read from the scripts themselves.

    python benchmarks/run.py --list        # this list
    python benchmarks/catalog.py --markdown # the table of README.md ("Every benchmark")

A benchmark is a script of this folder with a ``__main__`` block; what it measures is the
first sentence of its docstring. Scripts in :data:`RUN_BY_OTHERS` are started by another
benchmark (their parent is named); the other modules are parts the scripts import.
tests/test_benchmarks_catalog.py checks that every script has a docstring, that README.md
shows this table, and that the modules import each other without a cycle.
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Scripts with a ``__main__`` block that another benchmark runs (as a subprocess): who.
RUN_BY_OTHERS = {
    "sched_bench.py": "sched_runner.py (run.py), sched_ab.py, dedup_sched.py, hiredis_ab.py",
    "dedup_bench.py": "dedup_run.py",
    "site_server.py": "_util.py's Site (every crawl)",
    "redis_proxy.py": "crawls.py, latency.py, cluster_latency.py, proxy_delay.py",
    "site_load.py": "e2e.py (the site's raw throughput)",
}
#: This list itself.
CATALOG = "catalog.py"


@dataclass(frozen=True)
class Script:
    name: str
    #: The first sentence of its docstring.
    summary: str
    #: Whether it has a ``__main__`` block.
    runnable: bool

    @property
    def kind(self) -> str:
        if not self.runnable:
            return "part"
        if self.name == CATALOG:
            return "this list"
        return "run by " + RUN_BY_OTHERS[self.name] if self.name in RUN_BY_OTHERS else "benchmark"


def _summary(tree: ast.Module) -> str:
    doc = ast.get_docstring(tree) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.) ", paragraph, maxsplit=1)[0]


def _runnable(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


def scripts(folder: Path = HERE) -> list[Script]:
    """Every module of the folder, benchmarks first (run.py leading), then the others."""
    found = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found.append(Script(path.name, _summary(tree), _runnable(tree)))
    order = {"benchmark": 0, "this list": 2, "part": 3}
    return sorted(found, key=lambda s: (order.get(s.kind, 1), s.name != "run.py", s.name))


def text() -> str:
    """The list ``run.py --list`` prints."""
    lines = []
    for script in scripts():
        if script.kind == "benchmark":
            lines.append(f"python benchmarks/{script.name}\n    {script.summary}")
    lines.append("\nRun by the benchmarks above (not by hand):")
    for script in scripts():
        if script.kind.startswith("run by"):
            lines.append(f"  {script.name}: {script.kind}")
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """The table of README.md."""
    rows = ["| Script | What it measures or does | Run |", "|---|---|---|"]
    for script in scripts():
        summary = script.summary.replace("|", "\\|")
        rows.append(f"| `{script.name}` | {summary} | {script.kind} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="the table of README.md")
    args = parser.parse_args()
    print(markdown() if args.markdown else text(), end="")


if __name__ == "__main__":
    main()
