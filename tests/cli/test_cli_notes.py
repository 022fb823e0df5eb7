"""The command line's notes speak of the user's own texts only.

The truncation note counts the texts of the command's input that were cut to the contract's
``max_tokens``; the stored documents the guard re-embeds on open (to check that the index holds
this contract's vectors) are not the user's input and are never counted in it.
"""

from __future__ import annotations

import json

import pytest
from conftest import MINILM

from ctxemb_core.cli import main

LONG = " ".join(["Vitamin D deficiency is common in winter and is linked to bone loss."] * 12)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("ctxemb: note:")]


@pytest.fixture
def long_store(tmp_path, capsys):
    """An embedded store with a stamped collection of 20 documents longer than max_tokens=32."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"_id": f"d{i}", "title": f"doc {i}", "text": f"{i}: {LONG}"}) + "\n"
            for i in range(20)
        )
    )
    where = ["--collection", "longdocs", "--path", str(tmp_path / "chroma")]
    index = ["index", str(corpus), *where, "--model", MINILM, "--max-tokens", "32", "--no-cache"]
    code, _, err = run(capsys, *index)
    assert code == 0, err
    # Indexing cut the user's own 20 documents: that note is true and stays.
    assert any("20 texts were longer than max_tokens=32" in n for n in notes(err)), err
    return corpus, where


def test_a_short_query_prints_no_truncation_note(long_store, capsys):
    _, where = long_store
    # --no-cache: every text is encoded now, so any truncation would be counted.
    code, out, err = run(capsys, "query", "vitamin D deficiency", *where, "--no-cache")
    assert code == 0, err
    assert "query 'vitamin D deficiency'" in out
    assert notes(err) == [], err  # before: "16 texts were longer" (the open-time sample)


def test_a_long_query_is_the_one_text_named(long_store, capsys):
    _, where = long_store
    code, _, err = run(capsys, "query", LONG, *where, "--no-cache", "--sample", "20")
    assert code == 0, err
    found = notes(err)
    assert len(found) == 1 and "1 text was longer than max_tokens=32" in found[0], err


def test_a_no_op_reindex_prints_no_truncation_note(long_store, capsys):
    corpus, where = long_store
    again = ["index", str(corpus), *where, "--model", MINILM, "--max-tokens", "32", "--no-cache"]
    code, _, err = run(capsys, *again)
    assert code == 0, err
    assert notes(err) == [], err  # before: "16 texts were longer" (the open-time sample)
