"""The ctxemb command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import MINILM


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxemb_core.cli", *args], capture_output=True, text=True
    )


def test_inspect_prints_the_contract_as_json(minilm_contract):
    out = run("inspect", MINILM)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["fingerprint"] == minilm_contract.fingerprint
    assert data["contract"]["pooling"] == "mean"
    out = run("inspect", MINILM, "--pooling", "cls", "--no-normalize", "--truncate-dim", "128")
    data = json.loads(out.stdout)["contract"]
    assert (data["pooling"], data["normalize"], data["truncate_dim"]) == ("cls", False, 128)


def test_errors_are_one_readable_line_and_exit_code_2(tmp_path):
    out = run("inspect", str(tmp_path / "missing"))
    assert out.returncode == 2
    assert (
        out.stderr.startswith("ctxemb: error: ModelNotFoundError:")
        and "Traceback" not in out.stderr
    )
    out = run("inspect", MINILM, "--pooling", "average")
    assert out.returncode == 2 and "valid values are" in out.stderr


def test_demo_indexes_queries_and_shows_every_mismatch_refused(tmp_path):
    out = run("demo", "--path", str(tmp_path / "demo"))
    assert out.returncode == 0, out.stderr
    assert "24 documents added, 24 in all" in out.stdout
    again = run("demo", "--path", str(tmp_path / "demo"))
    assert "0 documents added, 24 in all" in again.stdout
    assert "-> garden-3" in out.stdout  # the slug query finds the slug document first
    assert out.stdout.count(": refused (") == 3
    assert "pooling: index='mean', caller='cls'" in out.stdout
    assert "NOT refused" not in out.stdout


def test_help_for_every_command():
    for args in (["--help"], ["inspect", "--help"], ["demo", "--help"]):
        out = run(*args)
        assert out.returncode == 0 and "usage: ctxemb" in out.stdout
