"""Fingerprints, digests, the export manifest and the cache layouts are what they were before the
model-folder layer moved (issue 26): a user's stamps, exports and caches stay valid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).with_name("golden.json")


def test_fingerprints_digests_and_layouts_are_the_recorded_ones():
    run = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("golden.py"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    now = json.loads(run.stdout)
    recorded = json.loads(GOLDEN.read_text())
    assert sorted(now) == sorted(recorded)
    for key in recorded:
        assert now[key] == recorded[key], key
