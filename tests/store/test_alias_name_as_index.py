"""An index opened, or created, under the name of one of the store's aliases is refused, in each
store and each interface's words: its caller meant the alias, whose readers would never see an
index of that name (``ctxemb index --collection docs`` used to create collection ``docs`` beside
alias ``docs``)."""

from __future__ import annotations

import chromadb
import pytest

import ctxemb_chroma
import ctxemb_pgvector
import ctxemb_qdrant
from ctxemb_core.aliases import create_alias
from ctxemb_core.cli import main
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.testing.conformance import DOCS, tiny_embedder

ALIAS = r"'docs' is an alias of this store \(serving {kind} 'docs-v1'\)"


@pytest.fixture(scope="module")
def tiny():
    return tiny_embedder()


def _aliased(adapter, client, tiny, **scope):
    """Index docs-v1 (a few documents) and alias docs over it."""
    index = adapter.open_collection(client, "docs-v1", tiny, **scope)
    index.add(list(DOCS), list(DOCS.values()))
    create_alias(adapter.catalog(client, **scope), "docs", "docs-v1")


def _refused(adapter, client, tiny, kind: str, client_name: str, **scope) -> None:
    with pytest.raises(InvalidInputError, match=ALIAS.format(kind=kind)) as err:
        adapter.open_collection(client, "docs", tiny, **scope)  # create=True: nothing created
    python, cli = str(err.value), err.value.message_for("cli")
    module = adapter.__name__
    assert f"AliasedIndex.open({module}.catalog({client_name}), 'docs', " in python
    assert "--alias docs" in cli and "--collection docs-v1" in cli and "(" + module not in cli
    assert not adapter.catalog(client, **scope).exists("docs")  # nothing created
    with pytest.raises(InvalidInputError, match=ALIAS.format(kind=kind)):
        adapter.open_collection(client, "docs", tiny, create=False, **scope)
    with pytest.raises(InvalidInputError, match=ALIAS.format(kind=kind)):
        adapter.verify(adapter.stored_collection(client, "docs", **scope), tiny)


def test_chroma(tmp_path, tiny):
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    _aliased(ctxemb_chroma, client, tiny)
    _refused(ctxemb_chroma, client, tiny, "collection", "client")


def test_qdrant(tmp_path, tiny):
    client = ctxemb_qdrant.connect(tmp_path / "qdrant")
    try:
        _aliased(ctxemb_qdrant, client, tiny)
        _refused(ctxemb_qdrant, client, tiny, "collection", "client")
    finally:
        client.close()


def test_pgvector(pg, tiny):  # a fresh database
    _aliased(ctxemb_pgvector, pg, tiny, schema="public")
    _refused(ctxemb_pgvector, pg, tiny, "table", "conn", schema="public")


def test_the_command_line_says_use_the_alias_and_creates_nothing(tmp_path, capsys):
    from ctxemb_core import demo as demo_data

    store = ["--path", str(tmp_path / "chroma")]
    corpus = str(demo_data.corpus_path())
    assert main(["index", corpus, "--collection", "docs-v1", *store]) == 0
    assert main(["alias", "create", "docs", "--collection", "docs-v1", *store]) == 0
    capsys.readouterr()
    for command in (["index", corpus], ["query", "tea"], ["verify"]):
        assert main([*command, "--collection", "docs", *store]) == 2
        err = capsys.readouterr().err
        assert "is an alias of this store (serving collection 'docs-v1')" in err, err
        assert "--alias docs" in err and "AliasedIndex" not in err
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    assert "docs" not in [c.name for c in client.list_collections()]
