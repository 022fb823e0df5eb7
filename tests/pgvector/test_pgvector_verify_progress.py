"""``ctxemb_pgvector.verify(..., all=True)`` draws its progress bar only when asked (see
tests/chroma/test_chroma_verify_progress.py)."""

from __future__ import annotations

from conftest import DOCS

import ctxemb_pgvector


def _bar(err: str) -> bool:
    return "verifying" in err and "record" in err


def test_pgvector_verify_all_draws_no_bar_unasked(pg, minilm, capsys):
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    table.add(list(DOCS), list(DOCS.values()))
    capsys.readouterr()
    assert ctxemb_pgvector.verify(table, minilm, all=True).ok
    assert not _bar(capsys.readouterr().err)
    assert ctxemb_pgvector.verify(table, minilm, all=True, progress=True).ok
    assert _bar(capsys.readouterr().err)
