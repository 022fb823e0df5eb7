"""benchmarks/cold_query.py runs: its --quick mode end to end, and its result file's shape.

No figure is asserted (tests never assert on wall-clock time); the benchmark must run and write
the result its docs quote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (DATA / "scifact").is_dir(), reason="no SciFact in the shared data")
def test_the_quick_mode_runs_and_writes_its_result(tmp_path):
    out = tmp_path / "cold_query_quick.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "integrations")])}
    args = ["--quick", "--runs", "1", "--data", str(DATA), "--cache-dir", str(tmp_path / "c")]
    done = subprocess.run(
        [sys.executable, "benchmarks/cold_query.py", *args, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["quick"] is True and result["documents"] == 48
    assert set(result["results"]) == {"sample0", "verifying", "verified"}
    assert result["same_top_hit"] is True
    assert result["machine"]["cpu"]["model_name"]
    assert "verified_over_sample0" in result["ratios"]
