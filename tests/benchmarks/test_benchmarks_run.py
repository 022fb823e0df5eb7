"""Every benchmark runs: each ``benchmarks/*.py`` answers ``--help`` and runs ``--quick``.

Nothing else runs the benchmarks, so a broken import or a renamed function in one of them went
unnoticed (issue 26: ``int8_recipes.py`` imported a function that was gone). The scripts are
found by glob, so a new one is held to the same from its first commit. ``--quick`` is each
script's own code paths on a tiny workload (marked ``bench_quick``: ``make bench-check``
runs them, ``make test`` leaves them out, as they cost ~200 CPU-s of CI's 900 s): its
figures are printed, not asserted (tests never assert on wall-clock time), and it must leave
``benchmarks/results/`` (the published figures) as it was.

``--help`` runs each script in a process of its own (0.2 s each: nothing heavy is imported
before the arguments are read). The quick runs of most scripts share one child process,
``quick_driver.py``, which runs them one after another: a quick run was mostly imports
(sentence-transformers, transformers and torch are ~13 CPU-s a process), paid once there, not
once a script. The driver runs each as ``python SCRIPT --quick`` would, puts back after each
what a script could leave to the next (environment, warnings filters, root logger, torch's
threads, the process-wide caches of loaded networks), and records each one's exit status,
stdout and stderr, traceback and changes to ``benchmarks/results/``, so that each script's test
asserts on its own record: a script that fails to import, or calls a function that is gone,
fails its own test only. The scripts in :data:`OWN_PROCESS` are about processes, and keep one
of their own (so does what a shared script starts as a process: canary_tolerance's
fresh-process canary is still a new interpreter).

The children run with the test session's environment: ``HF_HUB_OFFLINE=1`` and the session's
``CTXEMB_CACHE_DIR`` (``conftest._private_cache``), so that the ONNX exports they need are the
session's, built once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA
from quick_driver import digests

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
#: Every benchmark script; ``_common.py`` (and any other ``_`` module) is their shared helper.
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
#: Where a quick run's result goes (``_common.quick_folder``), as the scripts print it.
QUICK_RESULT = re.compile(r"(\S*ctxemb-bench-[\w-]+-quick-\w+/[\w.-]+\.json)")
#: Runs the other scripts' quick modes one after another in one process (see the docstring).
DRIVER = Path(__file__).with_name("quick_driver.py")
#: The scripts whose quick run keeps a process of its own, and why.
OWN_PROCESS = {
    "cold_start": "it reads its children's peak RSS, which Linux carries over from the parent: "
    "a parent that had loaded torch would set every child's floor",
    "cold_query": "it times fresh ctxemb processes, started from a small parent as in a full run",
    "under_load": "it times worker processes beside a busy one: a parent holding other scripts' "
    "thread pools and memory is not the machine it measures",
    "ray_index": "it starts and stops a Ray instance in its process, and sets Ray's environment "
    "when imported",
}
#: How long the driver may take for each script it runs (the timeout of one in its own process).
SCRIPT_TIMEOUT = 900


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


def _selected_shared(session: pytest.Session) -> list[Path]:
    """The scripts of this session's quick tests that run in the driver (not in OWN_PROCESS)."""
    chosen = {
        item.callspec.params["script"]
        for item in session.items
        if getattr(item, "originalname", None)
        == test_quick_mode_runs_and_leaves_the_published_results_alone.__name__
        and hasattr(item, "callspec")
    }
    return [s for s in SCRIPTS if s in chosen and s.stem not in OWN_PROCESS]


@pytest.fixture(scope="module")
def shared_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, dict[str, Any]], str]:
    """The driver's run of the shared scripts: each one's record by name, and its own output."""
    scripts = _selected_shared(request.session)
    records = tmp_path_factory.mktemp("quick-driver") / "records.jsonl"
    try:
        done = _run(
            DRIVER, str(records), *map(str, scripts), timeout=SCRIPT_TIMEOUT * max(1, len(scripts))
        )
        output = f"driver exited {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    except subprocess.TimeoutExpired as exc:
        output = f"driver killed after {exc.timeout} s"
    lines = records.read_text(encoding="utf-8").splitlines() if records.is_file() else []
    return {r["script"]: r for r in map(json.loads, lines)}, output


@pytest.mark.slow
@pytest.mark.bench_quick
@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="no SciFact in the shared data")
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_quick_mode_runs_and_leaves_the_published_results_alone(
    script: Path, request: pytest.FixtureRequest
) -> None:
    """``--quick`` exits 0, prints figures, writes its result elsewhere than results/."""
    if script.stem in OWN_PROCESS:
        before = digests()
        done = _run(script, "--quick", timeout=SCRIPT_TIMEOUT)
        changed = sorted({k for k, _ in digests().items() ^ before.items()})
        status, stdout, stderr, seconds = done.returncode, done.stdout, done.stderr, None
    else:
        records, driver = request.getfixturevalue("shared_runs")
        record = records.get(script.stem)
        assert record is not None, f"the quick driver left no record of {script.name}:\n{driver}"
        status, stdout, stderr = record["status"], record["stdout"], record["stderr"]
        stderr += record["traceback"] or ""
        changed, seconds = record["results_changed"], record["cpu_seconds"]
    tail = f"\n--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-3000:]}"
    assert status == 0, f"{script.name} --quick exited {status}{tail}"
    assert not changed, f"{script.name} --quick changed benchmarks/results/ {changed}{tail}"
    # Its figures are printed, and its result file went to a temporary folder.
    assert re.search(r"\d+\.\d+", stdout), f"no figures printed{tail}"
    match = QUICK_RESULT.search(stdout)
    assert match is not None, f"no quick result file named{tail}"
    written = Path(match.group(1))
    result = json.loads(written.read_text(encoding="utf-8"))
    assert result["quick"] is True, written
    assert result["benchmark"].startswith(script.stem), result["benchmark"]
    assert result["machine"]["cpu"]["model_name"]
    SHAPES.get(script.stem, lambda _: None)(result)
    if seconds is not None:
        print(f"{script.name} --quick in the driver: {seconds:.1f} CPU-s")


def _cold_query(result: dict) -> None:
    # The figures its docs quote: a cold query with no verified record, verifying, verified.
    assert result["documents"] == 48
    assert set(result["results"]) == {"sample0", "verifying", "verified"}
    assert result["same_top_hit"] is True
    assert "verified_over_sample0" in result["ratios"]


def _pgvector_index(result: dict) -> None:
    # The three ratios its goals are stated on, each against a side measured in the same run.
    assert result["documents"] == 16
    assert result["index"]["ratio"] > 0 and result["index"]["stored_vectors_min_cosine"] > 0.99
    assert result["insert"]["faster_plain"] in ("copy", "executemany")
    assert result["insert"]["ratio"] > 0
    assert result["query"]["queries"] == 3 and result["query"]["same_top10"] == "3/3"
    assert result["query"]["ratio_p50"] > 0 and result["query"]["embed_query_ms_p50"] > 0


#: Beyond the common keys, what a quick result of these benchmarks holds.
SHAPES = {"cold_query": _cold_query, "pgvector_index": _pgvector_index}
