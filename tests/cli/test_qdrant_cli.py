"""``ctxemb ... --store qdrant --qdrant-path DIR``: index, query, verify, restamp; the
options refused; an API key never shown; and ``ctxemb migrate`` to and from Chroma and
PostgreSQL, the vectors bit for bit (a tiny static model: no torch)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest

import ctxemb_chroma
import ctxemb_pgvector
import ctxemb_qdrant
from ctxemb_core.cli import main
from ctxemb_core.testing.conformance import DOCS, tiny_embedder


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def model() -> str:
    return str(tiny_embedder().model_path)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    return path


def test_index_query_verify_and_restamp(tmp_path, corpus, model, capsys, monkeypatch):
    store = ("--qdrant-path", str(tmp_path / "q"), "--collection", "docs")
    code, out, _ = run(capsys, "index", str(corpus), *store, "--model", model)
    assert code == 0 and f"{len(DOCS)} added" in out and "Qdrant" in out
    code, out, _ = run(capsys, "index", str(corpus), "--store", "qdrant", *store, "--model", model)
    assert code == 0 and f"{len(DOCS)} unchanged" in out
    code, out, _ = run(capsys, "query", *store, "--json", "how is green tea made")
    assert code == 0 and json.loads(out)["results"][0]["id"] == "tea"
    code, out, err = run(capsys, "query", *store, "--model", model, "--pooling", "cls", "tea")
    assert code == 2 and out == "" and "pooling: index='mean', caller='cls'" in err
    code, out, _ = run(capsys, "verify", *store, "--all")
    assert code == 0 and json.loads(out)["ok"]
    monkeypatch.chdir(Path(model).parent)  # the stamp names the model by its folder's name
    code, out, _ = run(capsys, "restamp", *store, "--query-prefix", "q: ")
    assert code == 0 and "query_prefix: '' -> 'q: '" in out


def test_options_refused_and_an_api_key_never_shown(tmp_path, corpus, model, capsys, monkeypatch):
    code, _, err = run(
        capsys, "index", str(corpus), "--store", "chroma", "--qdrant-path", "x", "--collection", "d"
    )
    assert code == 2 and "--qdrant-path is a Qdrant option" in err
    code, _, err = run(
        capsys,
        "query",
        "--qdrant-path",
        "x",
        "--qdrant-url",
        "http://h:1",
        "--collection",
        "d",
        "t",
    )
    assert code == 2 and "two stores" in err
    code, _, err = run(
        capsys, "query", "--qdrant-path", str(tmp_path / "none"), "--collection", "d", "t"
    )
    assert code == 2 and "no Qdrant store" in err and not (tmp_path / "none").exists()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("CTXEMB_QDRANT_API_KEY", "s3cret-api-key")
    url = f"https://127.0.0.1:{port}"
    code, out, err = run(capsys, "query", "--qdrant-url", url, "--collection", "d", "tea")
    assert code != 0 and "cannot be reached" in err and "s3cret" not in out + err


def _vectors(index, ids):
    return {r.id: r.vector.tobytes() for r in index.driver.read(ids, frozenset({"vector"}))}


def test_migrate_to_and_from_chroma_and_postgresql_bit_for_bit(tmp_path, corpus, model, pg, capsys):
    qdrant = ("--qdrant-path", str(tmp_path / "q"))
    assert (
        run(capsys, "index", str(corpus), *qdrant, "--collection", "docs", "--model", model)[0] == 0
    )
    hops = [
        (*qdrant, "--collection", "docs", "--to", "ch1", "--to-path", str(tmp_path / "c")),
        (
            "--path",
            str(tmp_path / "c"),
            "--collection",
            "ch1",
            "--to",
            "qd1",
            "--to-qdrant-path",
            qdrant[1],
        ),
        (*qdrant, "--collection", "qd1", "--to", "pg1", "--to-dsn", pg.ctxemb_dsn),
        (
            "--dsn",
            pg.ctxemb_dsn,
            "--collection",
            "pg1",
            "--to",
            "qd2",
            "--to-qdrant-path",
            qdrant[1],
        ),
    ]
    for hop in hops:
        code, out, err = run(capsys, "migrate", *hop)
        assert code == 0 and "nothing re-embedded" in out, err
    embedder = tiny_embedder()
    ids = list(DOCS)
    chroma = ctxemb_chroma.open_collection(ctxemb_chroma.connect(tmp_path / "c"), "ch1", embedder)
    client = ctxemb_qdrant.connect(qdrant[1])
    try:
        first, q1, q2 = (
            _vectors(ctxemb_qdrant.open_collection(client, n, embedder), ids)
            for n in ("docs", "qd1", "qd2")
        )
        table = _vectors(ctxemb_pgvector.open_table(pg, "pg1", embedder), ids)
    finally:
        client.close()
    # Chroma re-normalises a cosine collection's vectors on write: what it holds comes back
    # into Qdrant bit for bit, and so does every hop through PostgreSQL.
    assert q1 == _vectors(chroma, ids) and q1 == table == q2
    worst = max(
        np.abs(np.frombuffer(first[i], np.float32) - np.frombuffer(q1[i], np.float32)).max()
        for i in ids
    )
    assert worst <= 1e-6
