"""What a new user met on a first day (issue 43's polish): the demo's help lists only what it
takes."""

from __future__ import annotations

from ctxemb_core.cli import main


def test_the_demo_help_lists_no_store_it_refuses(capsys):
    assert main(["demo", "--help"]) == 0
    shown = capsys.readouterr().out
    assert "--store" not in shown and "pgvector" not in shown
    assert "--path" in shown  # its store's own option is still there
    assert main(["demo", "--store", "pgvector"]) == 2  # refused with the reason, as before
    assert "the demo runs on Chroma" in capsys.readouterr().err
