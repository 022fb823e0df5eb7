"""Fingerprints, digests, the export manifest and the cache layouts are what they were before the
model-folder layer moved (issue 26): a user's stamps, exports and caches stay valid."""

from __future__ import annotations

import json
from pathlib import Path

import golden

GOLDEN = Path(__file__).with_name("golden.json")


def test_fingerprints_digests_and_layouts_are_the_recorded_ones(tmp_path, monkeypatch):
    # In this process, not a fresh one: torch, transformers, onnx and sentence-transformers
    # are imported here already (~6 CPU-s a fresh process spent on them). The cache is the
    # test's own, so the export and the cache layout are made from nothing as in a fresh
    # process; every value is a function of files, and what this process loaded before is
    # held by weights digest.
    monkeypatch.setenv("CTXEMB_CACHE_DIR", str(tmp_path / "cache"))
    # As golden.py prints them: through JSON (tuples become lists).
    now = json.loads(json.dumps(golden.record(tmp_path), ensure_ascii=False))
    recorded = json.loads(GOLDEN.read_text())
    assert sorted(now) == sorted(recorded)
    for key in recorded:
        assert now[key] == recorded[key], key
