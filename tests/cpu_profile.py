"""Where the test run's CPU goes: each test's CPU seconds, its own and its children's.

On a 2-core machine the suite is bound by CPU, not by waiting (both cores are busy ~97 % of a
``make test``), so its wall time follows the CPU seconds it spends, and CPU seconds are the
steadier figure from hour to hour. ``--durations`` gives wall time, in which a test waiting on a
server and a test computing look alike.

``CTXEMB_CPU_PROFILE=DIR`` turns it on (:func:`pytest_configure`, which tests/conftest.py calls,
or ``-p cpu_profile`` with this folder on the path): each
pytest process (the xdist workers, or the one process without them) appends one JSON line per
test to ``DIR/<worker>.jsonl``: the node id, ``self`` (the process's user + system CPU seconds
while the test's setup, call and teardown ran), ``child`` (those of the processes it started
and reaped meanwhile: a ``ctxemb`` command, a fresh interpreter, a server stopped in its
teardown), ``wall`` and ``start`` (epoch seconds). A server that outlives its test (the run's
Chroma server) is counted by none. ``python tests/cpu_profile.py DIR`` prints the summary::

    make test CTXEMB_CPU_PROFILE=$PWD/build/cpu-profile
    .venv/bin/python tests/cpu_profile.py build/cpu-profile
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import pytest

PLUGIN = "ctxemb-cpu-profile"


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuProfile:
    """The pytest plugin: one record per test, written as soon as the test ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._out: TextIO | None = None

    def _file(self) -> TextIO:
        if self._out is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            self._out = open(self.folder / f"{worker}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        return self._out

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        own, children = _cpu()
        start = time.time()
        yield
        own_after, children_after = _cpu()
        record = {
            "id": item.nodeid,
            "self": round(own_after - own, 3),
            "child": round(children_after - children, 3),
            "wall": round(time.time() - start, 3),
            "start": round(start, 3),
        }
        out = self._file()
        out.write(json.dumps(record) + "\n")
        out.flush()

    def pytest_unconfigure(self) -> None:
        if self._out is not None:
            self._out.close()


def pytest_configure(config: pytest.Config) -> None:
    """Registers :class:`CpuProfile` once, if ``CTXEMB_CPU_PROFILE`` names a folder."""
    folder = os.environ.get("CTXEMB_CPU_PROFILE")
    if folder and not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.register(CpuProfile(Path(folder)), PLUGIN)


def load(folder: Path) -> list[dict[str, Any]]:
    """Every record of ``folder`` (all workers), one per test; the last of a test run twice."""
    records: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["id"]] = record
    return list(records.values())


def summary(records: Sequence[dict[str, Any]], top: int = 30) -> str:
    """Total CPU, CPU by test folder and the ``top`` tests by CPU, as text."""
    cpu = {r["id"]: r["self"] + r["child"] for r in records}
    total = sum(cpu.values())
    by_folder: dict[str, list[float]] = defaultdict(list)
    for test, seconds in cpu.items():
        path = test.split("::", 1)[0]
        by_folder[str(Path(path).parent)].append(seconds)
    lines = [f"{len(records)} tests, {total:.1f} CPU-s (own + the processes each started)", ""]
    lines.append(f"{'CPU-s':>8} {'tests':>6}  folder")
    for folder, values in sorted(by_folder.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{sum(values):8.1f} {len(values):6d}  {folder}")
    lines += ["", f"{'CPU-s':>8} {'child':>7} {'wall':>7}  the {top} tests that cost most"]
    by_id = {r["id"]: r for r in records}
    for test in sorted(cpu, key=lambda t: -cpu[t])[:top]:
        r = by_id[test]
        lines.append(f"{cpu[test]:8.2f} {r['child']:7.2f} {r['wall']:7.2f}  {test}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Summarise a CTXEMB_CPU_PROFILE folder.")
    parser.add_argument("folder", type=Path, help="the CTXEMB_CPU_PROFILE folder of a test run")
    parser.add_argument("--top", type=int, default=30, help="how many tests to list (30)")
    args = parser.parse_args(argv)
    records = load(args.folder)
    if not records:
        print(f"no test records in {args.folder}", file=sys.stderr)
        return 1
    print(summary(records, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
