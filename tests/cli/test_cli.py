"""The ctxemb command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MINILM

from ctxemb_core.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_inspect_prints_the_contract_as_json(minilm_contract, capsys):
    code, out, err = run(capsys, "inspect", MINILM)
    assert code == 0, err
    data = json.loads(out)
    assert data["fingerprint"] == minilm_contract.fingerprint
    assert data["contract"]["pooling"] == "mean"
    code, out, _ = run(
        capsys, "inspect", MINILM, "--pooling", "cls", "--no-normalize", "--truncate-dim", "128"
    )
    data = json.loads(out)["contract"]
    assert (data["pooling"], data["normalize"], data["truncate_dim"]) == ("cls", False, 128)


def test_errors_are_one_readable_line_and_exit_code_2(tmp_path, capsys):
    code, _, err = run(capsys, "inspect", str(tmp_path / "missing"))
    assert code == 2
    assert err.startswith("ctxemb: error: ModelNotFoundError:") and "Traceback" not in err
    code, _, err = run(capsys, "inspect", MINILM, "--pooling", "average")
    assert code == 2 and "invalid choice: 'average'" in err and len(err.splitlines()) == 1


def test_demo_indexes_queries_and_shows_every_mismatch_refused(tmp_path, capsys):
    code, out, err = run(capsys, "demo", "--path", str(tmp_path / "demo"))
    assert code == 0, err
    assert "24 documents added, 24 in all" in out
    _, again, _ = run(capsys, "demo", "--path", str(tmp_path / "demo"))
    assert "0 documents added, 24 in all" in again
    assert "-> garden-3" in out  # the slug query finds the slug document first
    assert out.count(": refused (") == 3
    assert "pooling: index='mean', caller='cls'" in out
    assert "NOT refused" not in out


def test_help_for_every_command(capsys):
    for command in (
        [],
        ["inspect"],
        ["demo"],
        ["index"],
        ["query"],
        ["verify"],
        ["migrate"],
        ["restamp"],
        ["eval"],
        ["detect"],
    ):
        code, out, err = run(capsys, *command, "--help")
        assert code == 0 and out.startswith("usage: ctxemb") and err == ""


@pytest.mark.heavy
def test_the_console_script_runs_as_a_process():
    """The installed entry point (and ``python -m``), end to end: one line, exit 2."""
    script = Path(sys.executable).with_name("ctxemb")
    runs = [[sys.executable, "-m", "ctxemb_core.cli"]]
    if script.is_file():
        runs.append([str(script)])
    for command in runs:
        out = subprocess.run(
            [*command, "index", "--batch-size", "0"], capture_output=True, text=True
        )
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith("ctxemb: error: ") and len(out.stderr.splitlines()) == 1
