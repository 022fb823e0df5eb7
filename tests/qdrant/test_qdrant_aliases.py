"""Qdrant's aliases pass core's alias suite (``CatalogConformance``) in local mode, in a folder
and in memory; Qdrant's own alias follows every switch, so a raw qdrant-client reader of the
alias reads the index ctxemb's readers read."""

from __future__ import annotations

import pytest
from qdrant_client import models

from ctxemb_core.aliases import Encoders, backfill, begin_upgrade, create_alias, cutover, rollback
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.aliases import IDS, TEXTS, CatalogConformance
from ctxemb_core.testing.conformance import tiny_embedder
from ctxemb_qdrant import catalog, connect
from ctxemb_qdrant._aliases import native_target


class TestQdrantAliasesInAFolder(CatalogConformance):
    @pytest.fixture
    def new_catalog(self, tmp_path):
        # A new handle per call: connect() joins the folder's one client in this process
        # (local mode locks its folder), as every catalog of the store does.
        return lambda: catalog(connect(tmp_path / "store"))


class TestQdrantAliasesInMemory(CatalogConformance):
    @pytest.fixture
    def new_catalog(self):
        client = connect(memory=True)
        return lambda: catalog(client)


def test_qdrants_own_alias_follows_every_switch():
    old = tiny_embedder()
    new = Embedder(old.contract.with_(truncate_dim=8))
    client = connect(memory=True)
    store = catalog(client)
    GuardedIndex.open(store.driver("docs-v1"), old).add(IDS[:8], TEXTS[:8])
    create_alias(store, "docs", "docs-v1")
    assert native_target(client, "docs") == "docs-v1"
    assert client.count("docs").count == 8  # a raw reader of the alias reads the target
    assert not store.exists("docs")  # an alias is not an index
    shadow = begin_upgrade(store, "docs", new).shadow.index
    backfill(store, "docs", Encoders(old, new), progress=False)
    assert native_target(client, "docs") == "docs-v1"  # until the cutover
    cutover(store, "docs", Encoders(old, new))
    assert native_target(client, "docs") == shadow
    info = client.get_collection("docs")
    assert info.config.params.vectors.size == 8  # the new contract's collection, by the alias
    rollback(store, "docs", Encoders(old, new))
    assert native_target(client, "docs") == "docs-v1"
    # Qdrant itself refuses a collection under the alias's name.
    with pytest.raises(ValueError):
        client.create_collection("docs", vectors_config=models.VectorParams(size=4, distance="Dot"))
    with pytest.raises(InvalidInputError):
        catalog(object())


def test_the_cli_upgrades_an_alias_on_qdrant_end_to_end(tmp_path, capsys):
    """``ctxemb index``, ``alias create``, ``upgrade`` (begin, backfill, gates, cutover),
    ``query --alias`` and ``upgrade --rollback`` on a small corpus in a local-mode folder."""
    import json

    from conftest import DOCS, MINILM

    from ctxemb_core.cli import main

    def run(*args: str) -> str:
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    store = ("--store", "qdrant", "--qdrant-path", str(tmp_path / "qdrant"))
    run("index", str(corpus), *store, "--collection", "docs-v1", "--model", MINILM)
    run("alias", "create", "docs", "--collection", "docs-v1", *store)
    out = run("upgrade", "docs", *store, "--truncate-dim", "128", "--sample", "2")
    assert "gate pass  parity: 0 records differ" in out
    record = json.loads(run("alias", "show", "docs", *store, "--json"))
    assert record["previous"]["index"] == "docs-v1" and record["generation"] == 3
    shadow = record["target"]["index"]
    # Each command closes the folder's client when it ends: a new one reads what it left.
    assert native_target(connect(tmp_path / "qdrant"), "docs") == shadow  # Qdrant's own too
    found = json.loads(run("query", "how is green tea made", *store, "--alias", "docs", "--json"))
    assert found["results"][0]["id"] == "tea"
    run("upgrade", "docs", *store, "--rollback")
    assert native_target(connect(tmp_path / "qdrant"), "docs") == "docs-v1"
