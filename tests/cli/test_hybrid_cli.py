"""``ctxemb index --hybrid`` / ``query --hybrid`` on an embedded Chroma store and PostgreSQL: one
corpus pass builds both sides; a query with another lexical recipe or fusion is refused naming
the field; an edited corpus re-indexes both sides; a run killed between the sides is mended by
the next run; options that need --hybrid are refused without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DOCS, MINILM

from ctxemb_core.cli import main

QUERY = "how is green tea made"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_corpus(path: Path, docs: dict[str, str]) -> Path:
    path.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in docs.items()))
    return path


def test_index_query_and_refuse_on_an_embedded_store(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl", DOCS)
    store = ("--path", str(tmp_path / "store"), "--collection", "docs")
    code, out, _ = run(capsys, "index", str(corpus), *store, "--model", MINILM, "--hybrid")
    assert code == 0 and f"{len(DOCS)} added" in out
    assert f"lexical side: {len(DOCS)} documents, bm25 lucene k1=1.5 b=0.75" in out
    assert (tmp_path / "store" / "ctxemb-lexical" / "docs" / "lexical.sqlite3").is_file()
    code, out, _ = run(capsys, "query", "how is green tea made", *store, "--hybrid", "--json")
    row = json.loads(out)
    assert code == 0 and row["results"][0]["id"] == "tea" and row["fusion"] == "rrf k=60 depth=100"
    assert row["results"][0]["dense_rank"] == 1 and row["results"][0]["lexical_rank"] == 1
    code, out, err = run(capsys, "query", "tea", *store, "--hybrid", "--stemmer", "none")
    assert code == 2 and out == "" and "lexical.stemmer: index='english', caller='none'" in err
    code, out, err = run(capsys, "query", "tea", *store, "--hybrid", "--rrf-k", "10")
    assert code == 2 and "fusion.k: index=60, caller=10" in err
    code, out, err = run(capsys, "query", "tea", *store, "--hybrid", "--pooling", "cls")
    assert code == 2 and "pooling: index='mean', caller='cls'" in err
    code, out, _ = run(capsys, "query", "tea", *store, "--hybrid", "--stemmer", "english")
    assert code == 0 and "fused" in out
    code, out, err = run(capsys, "query", "tea", *store, "--stemmer", "none")
    assert code != 0 and "add --hybrid" in err
    code, out, _ = run(
        capsys, "index", str(corpus), *store, "--hybrid", "--set-fusion", "--rrf-k", "30"
    )
    assert code == 0 and "rrf k=60 depth=100 -> rrf k=30 depth=100" in out
    code, out, _ = run(capsys, "query", "tea", *store, "--hybrid", "--rrf-k", "30")
    assert code == 0


def test_an_edited_corpus_reindexes_both_sides(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.jsonl", DOCS)
    store = ("--path", str(tmp_path / "store"), "--collection", "docs", "--hybrid")
    assert run(capsys, "index", str(corpus), *store, "--model", MINILM)[0] == 0
    edited = {**DOCS, "moon": "Lunar regolith is grey dust that clings to spacesuits."}
    edited.pop("bike")
    write_corpus(corpus, edited)
    code, out, _ = run(capsys, "index", str(corpus), *store, "--delete-missing")
    assert code == 0 and "1 updated" in out and "1 deleted" in out
    code, out, _ = run(capsys, "query", "regolith spacesuits", *store, "--json", "-k", "1")
    hit = json.loads(out)["results"][0]
    assert hit["id"] == "moon" and hit["lexical_rank"] == 1
    code, out, _ = run(capsys, "query", "bicycle chain oiled", *store, "--json")
    assert all(r["id"] != "bike" for r in json.loads(out)["results"])


def test_pgvector_keeps_the_lexical_side_in_its_database(pg, tmp_path, capsys):
    """No folder on the writing machine (issue 42, item 13): the lexical side is in the table's
    database; two tables each have their own (item 19); --rebuild-lexical takes another recipe."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", DOCS)
    store = ("--store", "pgvector", "--dsn", pg.ctxemb_dsn, "--hybrid")
    for table in ("docs", "more"):
        code, out, err = run(
            capsys, "index", str(corpus), *store, "--collection", table, "--model", MINILM
        )
        assert code == 0, err
        assert "PostgreSQL" in out and f"(table {table!r})" in out
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.jsonl"]  # no lexical folder here
    code, out, _ = run(capsys, "query", QUERY, *store, "--collection", "docs", "--json")
    assert code == 0 and json.loads(out)["results"][0]["id"] == "tea"
    code, out, err = run(
        capsys, "index", str(corpus), *store, "--collection", "more", "--rebuild-lexical",
        "--stemmer", "none",
    )  # fmt: skip
    assert code == 0 and "no stemmer" in out, err
    code, _, err = run(capsys, "query", QUERY, *store, "--collection", "docs", "--stemmer", "none")
    assert code == 2 and "lexical.stemmer: index='english', caller='none'" in err


def test_a_hybrid_query_before_the_lexical_side_says_the_whole_command(tmp_path, capsys):
    # The advice was "build it: ctxemb index --hybrid" (and "--rebuild-lexical" for a lost
    # side): run as printed, refused for its missing corpus and collection, and aimed at
    # ./chroma whatever store was queried. It now names this store and collection, and the
    # corpus the index came from (a re-index syncs: another corpus would add its documents).
    import shutil

    corpus = write_corpus(tmp_path / "corpus.jsonl", DOCS)
    folder = tmp_path / "store"
    store = ("--path", str(folder), "--collection", "docs")
    assert run(capsys, "index", str(corpus), *store, "--model", MINILM)[0] == 0
    code, out, err = run(capsys, "query", QUERY, *store, "--hybrid")
    assert code == 2 and out == "" and err.startswith("ctxemb: error: NoLexicalSideError")
    line = (
        f"ctxemb index <the corpus it was indexed from> --hybrid --path {folder} --collection docs"
    )
    assert f"build it: {line}" in err and err.count("\n") == 1
    assert not (folder / "ctxemb-lexical" / "docs").exists()  # nothing was built by the query
    assert run(capsys, "index", str(corpus), *store, "--hybrid")[0] == 0  # as advised
    shutil.rmtree(folder / "ctxemb-lexical" / "docs")  # the side lost
    code, _, err = run(capsys, "query", QUERY, *store, "--hybrid")
    assert code == 2 and err.startswith("ctxemb: error: DamagedStampError")
    assert f"{line} --rebuild-lexical" in err
    assert run(capsys, "index", str(corpus), *store, "--hybrid", "--rebuild-lexical")[0] == 0
    code, out, _ = run(capsys, "query", QUERY, *store, "--hybrid", "-k", "1")
    assert code == 0 and "tea" in out
