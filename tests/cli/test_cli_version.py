"""``ctxemb --version``: the installed distribution's version, exit 0."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from ctxemb_core.cli import main


def test_version_prints_the_package_version(capsys):
    code = main(["--version"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out == f"ctxemb {version('ctxemb')}\n" and out.err == ""


def test_version_from_the_console_entry_point():
    done = subprocess.run(
        [sys.executable, "-m", "ctxemb_core.cli", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ctxemb {version('ctxemb')}"


def test_help_lists_version(capsys):
    assert main(["--help"]) == 0
    assert "--version" in capsys.readouterr().out
