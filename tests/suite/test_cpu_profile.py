"""``CTXEMB_CPU_PROFILE``: each test's CPU seconds, its own and its children's, and the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = Path(__file__).with_name("busy_sample.py")
PROFILE = REPO / "tests" / "cpu_profile.py"


def test_each_test_gets_its_own_and_its_childrens_cpu_and_the_summary_ranks_them(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "profile"
    # The plugin alone (-p), without the suite's conftest and its session fixtures (the exports
    # it seeds): tests/conftest.py calls the same cpu_profile.pytest_configure.
    paths = [str(PROFILE.parent), os.environ.get("PYTHONPATH", "")]
    env = {
        **os.environ,
        "CTXEMB_CPU_PROFILE": str(folder),
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
    }
    env.pop("PYTEST_XDIST_WORKER", None)  # the child is a pytest of its own, not a worker
    argv = ["-q", "-p", "no:cacheprovider", "--noconftest", "-p", "cpu_profile", str(SAMPLE)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert [p.name for p in folder.iterdir()] == ["main.jsonl"]
    lines = (folder / "main.jsonl").read_text(encoding="utf-8").splitlines()
    records = {r["id"].rsplit("::", 1)[1]: r for r in map(json.loads, lines)}
    assert set(records) == {"test_spins_in_process", "test_spins_in_a_child"}
    own, child = records["test_spins_in_process"], records["test_spins_in_a_child"]
    assert own["self"] >= 0.3 and own["child"] < 0.1
    assert child["child"] >= 0.3  # the reaped child's CPU, not the parent's waiting
    assert child["self"] < 0.3
    for record in records.values():
        assert record["wall"] >= 0.3 and record["start"] > 0

    shown = subprocess.run(
        [sys.executable, str(PROFILE), str(folder), "--top", "1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.startswith("2 tests, ")
    assert "tests/suite" in shown
    listed = shown.split("the 1 tests that cost most", 1)[1].strip().splitlines()
    assert len(listed) == 1 and "busy_sample.py::test_spins_" in listed[0]


def test_the_summary_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(PROFILE), str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert run.stderr.strip() == f"no test records in {tmp_path}"
