"""Every benchmark runs: each ``benchmarks/*.py`` answers ``--help`` and runs ``--quick``.

Nothing else runs the benchmarks, so a broken import or a renamed function in one of them went
unnoticed (issue 26: ``int8_recipes.py`` imported a function that was gone). The scripts are
found by glob, so a new one is held to the same from its first commit. ``--quick`` is each
script's own code paths on a tiny workload: its figures are printed, not asserted (tests never
assert on wall-clock time), and it must leave ``benchmarks/results/`` (the published figures)
as it was.

The children run with the test session's environment: ``HF_HUB_OFFLINE=1`` and the session's
``CTXEMB_CACHE_DIR`` (``conftest._private_cache``), so that the ONNX exports they need are the
session's, built once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
#: Every benchmark script; ``_common.py`` (and any other ``_`` module) is their shared helper.
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
#: Where a quick run's result goes (``_common.quick_folder``), as the scripts print it.
QUICK_RESULT = re.compile(r"(\S*ctxemb-bench-[\w-]+-quick-\w+/[\w.-]+\.json)")


def _env() -> dict[str, str]:
    paths = [str(REPO), str(REPO / "integrations"), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,  # CTXEMB_CACHE_DIR: the session's (conftest._private_cache)
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HAYSTACK_TELEMETRY_ENABLED": "False",
    }


def _run(script: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _digests() -> dict[str, str]:
    return {
        p.relative_to(RESULTS).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(RESULTS.rglob("*"))
        if p.is_file()
    }


def test_every_benchmark_is_found() -> None:
    names = {p.stem for p in SCRIPTS}
    assert len(SCRIPTS) >= 12 and "int8_recipes" in names and "_common" not in names, names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_help_says_what_it_measures_and_where_it_writes(script: Path) -> None:
    done = _run(script, "--help", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: "), done.stdout[:500]
    text = " ".join(done.stdout.split())
    assert "--quick" in text, text
    assert "benchmarks/results/" in text, f"{script.name} --help does not say where it writes"


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="no SciFact in the shared data")
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_quick_mode_runs_and_leaves_the_published_results_alone(script: Path) -> None:
    before = _digests()
    started = time.perf_counter()
    done = _run(script, "--quick", timeout=900)
    seconds = time.perf_counter() - started
    after = _digests()
    tail = f"\n--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{script.name} --quick exited {done.returncode}{tail}"
    assert after == before, f"{script.name} --quick changed benchmarks/results/{tail}"
    # Its figures are printed, and its result file went to a temporary folder.
    assert re.search(r"\d+\.\d+", done.stdout), f"no figures printed{tail}"
    match = QUICK_RESULT.search(done.stdout)
    assert match is not None, f"no quick result file named{tail}"
    written = Path(match.group(1))
    result = json.loads(written.read_text(encoding="utf-8"))
    assert result["quick"] is True, written
    assert result["benchmark"].startswith(script.stem), result["benchmark"]
    assert result["machine"]["cpu"]["model_name"]
    SHAPES.get(script.stem, lambda _: None)(result)
    print(f"{script.name} --quick: {seconds:.1f} s")


def _cold_query(result: dict) -> None:
    # The figures its docs quote: a cold query with no verified record, verifying, verified.
    assert result["documents"] == 48
    assert set(result["results"]) == {"sample0", "verifying", "verified"}
    assert result["same_top_hit"] is True
    assert "verified_over_sample0" in result["ratios"]


#: Beyond the common keys, what a quick result of these benchmarks holds.
SHAPES = {"cold_query": _cold_query}
