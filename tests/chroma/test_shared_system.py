"""One Chroma system per real folder: ctxemb joins whatever client the process already has on
that folder, whatever spelling of the path (``./x``, ``x``, absolute, ``~``, trailing slash,
symlink), so a write through one is seen by a query through the other.

Chroma keys its in-process systems by the ``persist_directory`` string as given
(``chromadb/api/shared_system_client.py``, ``_get_identifier_from_settings``): ``"./x"`` and
``"x"`` are two systems on one folder, each with its own cached vector segment, and a query
through one does not see what the other wrote after its first query.
"""

from __future__ import annotations

import os
from pathlib import Path

import chromadb
import pytest
from haystack import Document, Pipeline
from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_chroma import connect, open_collection
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
)


@pytest.fixture(autouse=True)
def _own_systems():
    """Each test's Chroma systems are stopped after it: tests reuse relative names (``./x``) in
    their own working folders, and Chroma would hand a later test an earlier one's system."""
    from chromadb.api.shared_system_client import SharedSystemClient

    before = set(SharedSystemClient._identifier_to_system)
    yield
    for identifier in set(SharedSystemClient._identifier_to_system) - before:
        SharedSystemClient._identifier_to_system.pop(identifier).stop()
        SharedSystemClient._identifier_to_refcount.pop(identifier, None)


TEA = "Green tea leaves are steamed soon after picking."
BIKE = "A bicycle chain lasts longer when it is oiled."


def _haystack_pipes(contract, store):
    index = Pipeline()
    index.add_component("embedder", ContractDocumentEmbedder(contract=contract, progress_bar=False))
    index.add_component("writer", ContractDocumentWriter(store))
    index.connect("embedder.documents", "writer.documents")
    query = Pipeline()
    query.add_component("embedder", ContractTextEmbedder(contract=contract))
    query.add_component("retriever", ContractRetriever(ChromaEmbeddingRetriever(store, top_k=5)))
    query.connect("embedder.embedding", "retriever.query_embedding")
    query.connect("embedder.fingerprint", "retriever.fingerprint")
    return index, query


def _found(query: Pipeline, text: str) -> set[str]:
    out = query.run({"embedder": {"text": text}})["retriever"]["documents"]
    return {d.id for d in out}


@pytest.mark.parametrize("spelling", ["./x", "x", "x/", "absolute"])
def test_haystack_writes_after_the_first_query_are_found(
    minilm_contract, tmp_path, monkeypatch, spelling
):
    monkeypatch.chdir(tmp_path)
    path = str(tmp_path / "x") if spelling == "absolute" else spelling
    store = ChromaDocumentStore(collection_name="docs", persist_path=path)
    index, query = _haystack_pipes(minilm_contract, store)
    index.run({"embedder": {"documents": [Document(id="tea", content=TEA)]}})
    assert _found(query, "how is green tea made") == {"tea"}
    index.run({"embedder": {"documents": [Document(id="bike", content=BIKE)]}})
    assert store.count_documents() == 2
    assert _found(query, "how is green tea made") == {"tea", "bike"}


def test_haystack_store_made_after_another_client_of_the_folder(
    minilm_contract, tmp_path, monkeypatch
):
    # The user's own client on the folder (another spelling) exists before the store: the
    # writer, the retriever and the user's client all see one system.
    monkeypatch.chdir(tmp_path)
    mine = chromadb.PersistentClient(str(tmp_path / "x"))
    store = ChromaDocumentStore(collection_name="docs", persist_path="./x")
    index, query = _haystack_pipes(minilm_contract, store)
    index.run({"embedder": {"documents": [Document(id="tea", content=TEA)]}})
    assert _found(query, "how is green tea made") == {"tea"}
    assert mine.get_collection("docs").query(
        query_texts=None, query_embeddings=[[0.0] * 384], n_results=5
    )["ids"] == [["tea"]]
    index.run({"embedder": {"documents": [Document(id="bike", content=BIKE)]}})
    assert _found(query, "how is green tea made") == {"tea", "bike"}
    again = mine.get_collection("docs").query(query_embeddings=[[0.0] * 384], n_results=5)
    assert set(again["ids"][0]) == {"tea", "bike"}


def test_langchain_chroma_and_ctxemb_share_one_system(
    minilm_contract, minilm, tmp_path, monkeypatch
):
    from ctxemb_langchain import ContractChroma, ContractEmbeddings

    monkeypatch.chdir(tmp_path)
    store = ContractChroma("docs", ContractEmbeddings(minilm_contract), persist_directory="./x")
    store.add_texts([TEA], ids=["tea"])
    assert [d.id for d in store.similarity_search("green tea", k=5)] == ["tea"]
    # ctxemb's own client, spelled as connect() or the CLI would: the same system.
    client = connect("x")
    assert client._identifier == store._client._identifier
    docs = open_collection(client, "docs", minilm)
    assert docs.query(["green tea"], n_results=5)["ids"] == [["tea"]]
    store.add_texts([BIKE], ids=["bike"])
    assert set(docs.query(["green tea"], n_results=5)["ids"][0]) == {"tea", "bike"}
    docs.add(["moon"], ["The Moon shows phases as it orbits the Earth."])
    assert {d.id for d in store.similarity_search("green tea", k=5)} == {"tea", "bike", "moon"}


def test_a_second_contract_chroma_with_another_spelling_joins_the_first(
    minilm_contract, tmp_path, monkeypatch
):
    from ctxemb_langchain import ContractChroma, ContractEmbeddings

    monkeypatch.chdir(tmp_path)
    embeddings = ContractEmbeddings(minilm_contract)
    writer = ContractChroma("docs", embeddings, persist_directory="./x")
    writer.add_texts([TEA], ids=["tea"])
    reader = ContractChroma("docs", embeddings, persist_directory=str(tmp_path / "x") + "/")
    assert [d.id for d in reader.similarity_search("green tea", k=5)] == ["tea"]
    writer.add_texts([BIKE], ids=["bike"])
    assert {d.id for d in reader.similarity_search("green tea", k=5)} == {"tea", "bike"}


def _spellings(tmp_path: Path) -> dict[str, str]:
    os.symlink(tmp_path / "d", tmp_path / "link")
    return {
        "./d": "./d",
        "d": "d",
        "d/": "d/",
        "absolute": str(tmp_path / "d"),
        "symlink": "link",
        "home": "~/d",
    }


@pytest.mark.parametrize("first", ["./d", "d", "absolute", "symlink"])
@pytest.mark.parametrize("second", ["./d", "d", "d/", "absolute", "symlink", "home"])
def test_ctxemb_joins_a_plain_client_made_with_another_spelling(
    minilm, tmp_path, monkeypatch, first, second
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d").mkdir()
    spelled = _spellings(tmp_path)
    plain = chromadb.PersistentClient(spelled[first])
    ours = connect(spelled[second])
    assert ours._identifier == plain._identifier
    docs = open_collection(ours, "docs", minilm)
    docs.add(["tea"], [TEA])
    assert docs.query(["green tea"], n_results=5)["ids"] == [["tea"]]
    raw = plain.get_collection("docs")
    raw.add(ids=["bike"], documents=[BIKE], embeddings=minilm.embed_documents([BIKE]).tolist())
    assert set(docs.query(["green tea"], n_results=5)["ids"][0]) == {"tea", "bike"}


def test_joining_keeps_the_first_clients_settings(tmp_path, monkeypatch):
    from chromadb.config import Settings

    monkeypatch.chdir(tmp_path)
    plain = chromadb.PersistentClient(
        "./d", settings=Settings(allow_reset=True, anonymized_telemetry=False)
    )
    ours = connect("d")
    assert ours._identifier == plain._identifier


def test_a_relative_path_after_a_chdir_is_the_new_folder(minilm, tmp_path, monkeypatch):
    # Chroma would hand out the system opened on ./d of the first folder to any "./d".
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    monkeypatch.chdir(tmp_path / "one")
    first = connect("./d")
    open_collection(first, "docs", minilm).add(["tea"], [TEA])
    monkeypatch.chdir(tmp_path / "two")
    second = connect("./d")
    assert second._identifier != first._identifier
    assert [c.name for c in second.list_collections()] == []
    assert (tmp_path / "two" / "d" / "chroma.sqlite3").is_file()


def test_other_settings_for_an_open_folder_are_refused_by_name(tmp_path, monkeypatch):
    from ctxemb_core.errors import InvalidInputError

    monkeypatch.chdir(tmp_path)
    chromadb.PersistentClient("./d")
    with pytest.raises(InvalidInputError, match="allow_reset differ"):
        connect("d", settings={"allow_reset": True})


def test_contract_chroma_joins_a_plain_langchain_chroma_of_the_folder(
    minilm_contract, minilm, tmp_path, monkeypatch
):
    from langchain_chroma import Chroma

    from ctxemb_langchain import ContractChroma, ContractEmbeddings

    monkeypatch.chdir(tmp_path)
    embeddings = ContractEmbeddings(minilm_contract)
    plain = Chroma("notes", embeddings, persist_directory="./x")  # the user's, made first
    store = ContractChroma("docs", embeddings, persist_directory="x")
    assert store._client._identifier == plain._client._identifier
    store.add_texts([TEA], ids=["tea"])
    assert [d.id for d in store.similarity_search("green tea", k=5)] == ["tea"]
    raw = plain._client.get_collection("docs")
    raw.add(ids=["bike"], documents=[BIKE], embeddings=minilm.embed_documents([BIKE]).tolist())
    assert {d.id for d in store.similarity_search("green tea", k=5)} == {"tea", "bike"}
