"""benchmarks/ is as easy to walk as the package: one entry point lists every benchmark
and what it measures (``python benchmarks/run.py --list``), README.md shows the same list,
and the folder's modules import each other without a cycle."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import catalog  # noqa: E402  (benchmarks/catalog.py: stdlib only)


def test_run_list_names_every_benchmark_and_what_it_measures():
    listed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    for script in catalog.scripts():
        if script.kind == "benchmark":
            assert f"python benchmarks/{script.name}\n    {script.summary}" in listed
        elif script.kind.startswith("run by"):
            assert f"  {script.name}: {script.kind}" in listed
    assert "python benchmarks/run.py" in listed and "sched_bench.py: run by" in listed


def test_every_script_says_what_it_does():
    missing = [s.name for s in catalog.scripts() if not s.summary]
    assert not missing, f"give these a docstring (its first sentence is listed): {missing}"
    for name in catalog.RUN_BY_OTHERS:
        assert (BENCHMARKS / name).exists(), f"catalog.RUN_BY_OTHERS names a gone script: {name}"


def test_the_readme_shows_the_generated_table():
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"<!-- catalog: start -->\n(.*?)<!-- catalog: end -->", readme, re.S)
    assert shown is not None, "benchmarks/README.md lost its catalog markers"
    assert shown.group(1) == catalog.markdown(), (
        "benchmarks/README.md's table is stale: paste `python benchmarks/catalog.py --markdown`"
    )


def _imports(path: Path, names: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found & names - {path.stem}


def test_no_import_cycle_between_benchmark_modules():
    names = {path.stem for path in BENCHMARKS.glob("*.py")}
    graph = {path.stem: _imports(path, names) for path in BENCHMARKS.glob("*.py")}
    cycles = []

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for target in graph[start]:
            if target == goal or (target not in seen and reaches(target, goal, seen | {target})):
                return True
        return False

    cycles = sorted(name for name in graph if reaches(name, name, set()))
    assert not cycles, f"these benchmark modules import themselves through others: {cycles}"
