"""``ctxemb ... --store pgvector --dsn DSN`` on a real PostgreSQL: index, query, verify, migrate
(also across stores, vectors and stamp carried), restamp, detect; and the options refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import DOCS, MINILM

import ctxemb_chroma
import ctxemb_pgvector
from ctxemb_core.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    return path


def test_index_query_verify_and_refusal(pg, corpus, capsys):
    dsn = pg.ctxemb_dsn
    store = ("--store", "pgvector", "--dsn", dsn, "--collection", "docs")
    code, out, _ = run(capsys, "index", str(corpus), *store, "--model", MINILM)
    assert code == 0 and f"{len(DOCS)} added" in out
    code, out, _ = run(capsys, "index", str(corpus), *store)
    assert code == 0 and f"{len(DOCS)} unchanged" in out
    code, out, _ = run(capsys, "query", *store, "--json", "how is green tea made")
    assert code == 0 and json.loads(out)["results"][0]["id"] == "tea"
    code, out, err = run(capsys, "query", *store, "--model", MINILM, "--pooling", "cls", "tea")
    assert code == 2 and out == "" and "pooling: index='mean', caller='cls'" in err
    code, out, _ = run(capsys, "verify", *store, "--all")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["sample_size"] == len(DOCS)
    assert report["configuration"] == "match"


def test_restamp_and_detect(pg, corpus, capsys):
    store = ("--store", "pgvector", "--dsn", pg.ctxemb_dsn, "--collection", "docs")
    assert run(capsys, "index", str(corpus), *store, "--model", MINILM)[0] == 0
    code, out, _ = run(capsys, "restamp", *store, "--query-prefix", "q: ")
    assert code == 0 and "query_prefix: '' -> 'q: '" in out
    assert ctxemb_pgvector.stamped_contract(pg, "docs").query_prefix == "q: "
    code, out, _ = run(capsys, "detect", *store, "--json")
    assert code == 0 and json.loads(out)["conclusive"]


def test_options_of_another_store_are_refused(pg, corpus, capsys):
    code, _, err = run(
        capsys, "index", str(corpus), "--store", "pgvector", "--path", "x", "--collection", "d"
    )
    assert code == 2 and "--path is a Chroma option" in err
    code, _, err = run(capsys, "query", "--store", "pgvector", "--collection", "d", "tea")
    assert code == 2 and "needs --dsn" in err


def test_migrate_within_and_across_stores(pg, corpus, tmp_path, capsys, minilm):
    chroma = tmp_path / "chroma"
    src = ("--collection", "docs", "--path", str(chroma))
    assert run(capsys, "index", str(corpus), *src, "--model", MINILM)[0] == 0
    # Chroma -> pgvector under the same contract: nothing re-embedded, vectors bit for bit.
    code, out, _ = run(
        capsys, "migrate", *src, "--to", "docs", "--to-store", "pgvector", "--to-dsn", pg.ctxemb_dsn
    )
    assert code == 0 and "nothing re-embedded" in out
    client = ctxemb_chroma.connect(path=str(chroma))
    source = ctxemb_chroma.open_collection(client, "docs", minilm)
    table = ctxemb_pgvector.open_table(pg, "docs", minilm)
    assert table.stamp.to_metadata() == source.stamp.to_metadata()
    a = source.get(ids=["tea", "bank"], include=["embeddings"])
    b = table.get(ids=["tea", "bank"], include=["embeddings"])
    order = [b["ids"].index(i) for i in a["ids"]]
    assert np.array_equal(np.asarray(a["embeddings"]), np.asarray(b["embeddings"])[order])
    # ... within pgvector, re-embedded under a new contract ...
    pgs = ("--store", "pgvector", "--dsn", pg.ctxemb_dsn, "--collection", "docs")
    code, out, _ = run(capsys, "migrate", *pgs, "--to", "docs128", "--truncate-dim", "128")
    assert code == 0 and "truncate_dim" in out
    assert ctxemb_pgvector.stamped_contract(pg, "docs128").truncate_dim == 128
    # ... and back into a new Chroma collection.
    code, out, _ = run(
        capsys, "migrate", *pgs, "--to", "back", "--to-store", "chroma", "--to-path", str(chroma)
    )
    assert code == 0
    back = ctxemb_chroma.open_collection(client, "back", minilm)
    assert back.ids() == set(DOCS) and back.stamp.fingerprint == source.stamp.fingerprint


def test_detect_adopts_a_table_written_around_ctxemb(pg, capsys, minilm):
    # A table as Haystack's PgvectorDocumentStore creates it, filled by plain SQL.
    pg.execute(
        "CREATE TABLE legacy (id VARCHAR(128) PRIMARY KEY, embedding vector(384), content TEXT, "
        "blob_data BYTEA, blob_meta JSONB, blob_mime_type VARCHAR(255), meta JSONB)"
    )
    vectors = minilm.embed_documents(list(DOCS.values())).astype(np.float32)
    for (i, text), vector in zip(DOCS.items(), vectors, strict=True):
        pg.execute(
            "INSERT INTO legacy (id, embedding, content) VALUES (%s, %s, %s)", (i, vector, text)
        )
    store = ("--store", "pgvector", "--dsn", pg.ctxemb_dsn, "--collection", "legacy")
    code, _, err = run(capsys, "query", *store, "tea")
    assert code == 2 and "ctxemb detect --store pgvector" in err
    code, out, _ = run(capsys, "detect", *store, "--model", MINILM, "--adopt")
    assert code == 0 and "adopted" in out
    code, out, _ = run(capsys, "query", *store, "--json", "how is green tea made")
    assert code == 0 and json.loads(out)["results"][0]["id"] == "tea"
    # Rows written after adoption by any client take the newest ctxemb_seq.
    seq = pg.execute("SELECT max(ctxemb_seq) FROM legacy").fetchone()[0]
    pg.execute("UPDATE legacy SET content = 'changed' WHERE id = 'moon'")
    assert pg.execute("SELECT ctxemb_seq FROM legacy WHERE id = 'moon'").fetchone()[0] > seq
