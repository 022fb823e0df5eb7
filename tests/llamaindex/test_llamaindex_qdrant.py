"""Qdrant through the three frameworks, one stamp: LlamaIndex's ContractQdrantVectorStore, and a
collection written by any of Haystack's ``QdrantDocumentStore``, LangChain's ContractQdrant and
LlamaIndex opens through the two others and ``ctxemb_qdrant`` (the CLI's path) under the same
contract, and is refused by each under another with the field named.

A tiny static model built in code (no torch) stands for the contract: the stamp and its checks
are the point, not the model. One file, one folder in Qdrant's local mode (one client per folder
in a process: every framework here joins it).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("llama_index.core", reason="the llamaindex extra is not installed")

from haystack import Document as HaystackDocument
from haystack_integrations.components.retrievers.qdrant import QdrantEmbeddingRetriever
from haystack_integrations.document_stores.qdrant import QdrantDocumentStore
from llama_index.core.schema import TextNode

import ctxemb_qdrant
from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.cli import main
from ctxemb_core.errors import ContractMismatchError, InvalidInputError
from ctxemb_core.testing.conformance import _models, tiny_embedder
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
)
from ctxemb_langchain import ContractEmbeddings, ContractQdrant
from ctxemb_llamaindex import ContractEmbedding, ContractQdrantVectorStore, load_index

TEXTS = {
    "tea": "green tea leaves are steamed",
    "oil": "oil the bicycle chain",
    "moon": "moon phases follow its orbit",
}
QUERY = "green tea"


@pytest.fixture(scope="module")
def contract() -> EmbeddingContract:
    return tiny_embedder().contract


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("qdrant-frameworks"))


# -- each framework writes, reads and is refused ------------------------------------------------


def _haystack_store(folder: str, name: str) -> QdrantDocumentStore:
    return QdrantDocumentStore(path=folder, index=name, embedding_dim=16, progress_bar=False)


def haystack_write(folder: str, name: str, contract: EmbeddingContract) -> None:
    documents = [HaystackDocument(id=i, content=t) for i, t in TEXTS.items()]
    embedded = ContractDocumentEmbedder(contract=contract).run(documents)["documents"]
    ContractDocumentWriter(_haystack_store(folder, name)).run(embedded)


def haystack_first(folder: str, name: str, contract: EmbeddingContract) -> str:
    query = ContractTextEmbedder(contract=contract).run(QUERY)
    retriever = ContractRetriever(QdrantEmbeddingRetriever(_haystack_store(folder, name), top_k=1))
    return retriever.run(query["embedding"], query["fingerprint"])["documents"][0].id


def langchain_write(folder: str, name: str, contract: EmbeddingContract) -> None:
    store = ContractQdrant(None, name, ContractEmbeddings(contract), path=folder)
    store.add_texts(list(TEXTS.values()), ids=list(TEXTS))


def langchain_first(folder: str, name: str, contract: EmbeddingContract) -> str:
    store = ContractQdrant(None, name, ContractEmbeddings(contract), path=folder, create=False)
    return str(store.similarity_search(QUERY, k=1)[0].id)


def llamaindex_write(folder: str, name: str, contract: EmbeddingContract) -> None:
    store = ContractQdrantVectorStore(name, ContractEmbedding(contract), path=folder)
    load_index(store).insert_nodes([TextNode(id_=i, text=t) for i, t in TEXTS.items()])


def llamaindex_first(folder: str, name: str, contract: EmbeddingContract) -> str:
    store = ContractQdrantVectorStore(name, ContractEmbedding(contract), path=folder, create=False)
    return str(load_index(store).as_retriever(similarity_top_k=1).retrieve(QUERY)[0].node.node_id)


def core_first(folder: str, name: str, contract: EmbeddingContract) -> str:
    client = ctxemb_qdrant.connect(folder)
    opened = ctxemb_qdrant.open_collection(client, name, Embedder(contract), create=False)
    return str(opened.query([QUERY], 1)["ids"][0][0])


Read = Callable[[str, str, EmbeddingContract], str]
WRITERS = {"haystack": haystack_write, "langchain": langchain_write, "llamaindex": llamaindex_write}
READERS: dict[str, Read] = {
    "haystack": haystack_first,
    "langchain": langchain_first,
    "llamaindex": llamaindex_first,
    "ctxemb_qdrant": core_first,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_collection_written_by_one_framework_opens_through_every_other(
    writer, folder, contract, capsys
):
    WRITERS[writer](folder, writer, contract)
    other = contract.with_(pooling="cls")
    for reader, first in READERS.items():
        assert first(folder, writer, contract) == "tea", reader
        with pytest.raises(ContractMismatchError) as refused:
            first(folder, writer, other)
        assert refused.value.fields == ("pooling",), reader
    # ... and through the command line (`ctxemb query --store qdrant --qdrant-path`).
    query = ["query", "--store", "qdrant", "--qdrant-path", folder, "--collection", writer]
    model = ["--model", str(_models()[0]), "--name", contract.model, "--json", "-k", "1"]
    assert main([*query, *model, QUERY]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["id"] == "tea"
    assert main([*query, *model, "--pooling", "cls", QUERY]) != 0
    assert "pooling: index='mean', caller='cls'" in capsys.readouterr().err
    # The stamp is the collection's metadata, the same whoever wrote it.
    read = ctxemb_qdrant.driver(ctxemb_qdrant.connect(folder), writer).read_stamp()
    assert read is not None and read.metadata["ctxemb:fingerprint"] == contract.fingerprint


def test_the_llamaindex_store_reads_its_stamp_and_refuses_bad_arguments(folder, contract):
    llamaindex_write(folder, "stamped", contract)
    store = ContractQdrantVectorStore("stamped", path=folder)  # the stamp's contract
    assert store.contract.fingerprint == contract.fingerprint
    assert store.client is ctxemb_qdrant.connect(folder)
    assert store.get_nodes(["moon"])[0].get_content() == TEXTS["moon"]
    with pytest.raises(InvalidInputError, match="one of path="):
        ContractQdrantVectorStore("stamped", path=folder, url="http://127.0.0.1:6333")


def test_the_qdrant_vias_share_one_collection_and_refuse_another_contract(tmp_path, capsys):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    lines = [json.dumps({"_id": k, "text": v}) for k, v in TEXTS.items()]
    (beir / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "green tea"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ttea\t1\n")
    common = ["eval", "--data", str(beir), "--k", "3", "--model", str(_models()[0]), "--no-cache"]
    where = ["--qdrant-path", str(tmp_path / "qdrant"), "--collection", "shared"]
    runs = {}
    for via in ("memory", "haystack-qdrant", "langchain-qdrant", "llamaindex-qdrant"):
        assert main([*common, "--via", via, *(where if via != "memory" else [])]) == 0
        runs[via] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # Haystack indexed the collection; LangChain and LlamaIndex found it whole, scored alike.
    assert [runs[v]["indexed_now"] for v in runs] == [3, 3, 0, 0]
    for via in ("haystack-qdrant", "langchain-qdrant", "llamaindex-qdrant"):
        assert runs[via]["unrounded"] == pytest.approx(runs["memory"]["unrounded"]), via
        assert runs[via]["store"] == {"kind": "local", "path": where[1]}
    for via in ("haystack-qdrant", "langchain-qdrant", "llamaindex-qdrant"):
        assert main([*common, "--via", via, *where, "--pooling", "cls"]) != 0
        assert "pooling" in capsys.readouterr().err
    assert main([*common, "--via", "langchain-qdrant", "--path", "./db"]) == 2
    assert "--via langchain-qdrant does not use --path" in capsys.readouterr().err


def test_after_a_switch_every_framework_serves_the_named_vector(folder, contract, capsys):
    """The in-place upgrade's switch reaches every reader: each framework's Qdrant store (and
    core's) opened under the new contract serves vector ``v2``; under the old one it is refused
    with the vector served and the switch back."""
    core_write = WRITERS["langchain"]
    core_write(folder, "switched", contract)
    new = Embedder(contract.with_(truncate_dim=8))
    client = ctxemb_qdrant.connect(folder)
    ctxemb_qdrant.add_named_vector(client, "switched", "v2", new)
    ctxemb_qdrant.backfill_named(client, "switched", "v2", new)
    ctxemb_qdrant.switch_named(client, "switched", "v2")
    from ctxemb_core.index import GuardedIndex

    view = ctxemb_qdrant.NamedVectorView(client, "switched", "v2")
    expected = GuardedIndex.open(view, new).query(QUERY, 1)[0][0].id  # v2's own answer
    readers = {k: v for k, v in READERS.items() if k != "haystack"}  # its store: 16 wide
    for reader, first in readers.items():
        assert first(folder, "switched", new.contract) == expected, reader
        with pytest.raises(ContractMismatchError, match="now serves vector 'v2'"):
            first(folder, "switched", contract)
    store = QdrantDocumentStore(path=folder, index="switched", embedding_dim=8, progress_bar=False)
    query = ContractTextEmbedder(contract=new.contract).run(QUERY)
    retriever = ContractRetriever(QdrantEmbeddingRetriever(store, top_k=1))
    found = retriever.run(query["embedding"], query["fingerprint"])["documents"]
    assert found[0].id == expected
    with pytest.raises(ContractMismatchError, match="now serves vector 'v2'"):
        haystack_first(folder, "switched", contract)


def test_llamaindex_on_chroma_names_its_own_adopt_and_no_other_framework(tmp_path):
    # The adopt advice names LlamaIndex's own store, never another framework's.
    import chromadb

    from ctxemb_core.errors import MissingStampError
    from ctxemb_core.testing.conformance import DOCS
    from ctxemb_llamaindex import ContractChromaVectorStore

    tiny = tiny_embedder()
    client, name = chromadb.PersistentClient(path=str(tmp_path)), "plain"
    raw = client.create_collection(name, embedding_function=None)
    vectors = np.asarray(tiny.embed_documents(list(DOCS.values())))
    raw.add(ids=list(DOCS), embeddings=vectors, documents=list(DOCS.values()))
    with pytest.raises(MissingStampError) as err:
        ContractChromaVectorStore(name, ContractEmbedding(tiny.contract), client=client)
    assert "in LlamaIndex ContractChromaVectorStore(..., adopt=True)" in str(err.value)
    assert "LangChain" not in str(err.value) and "Haystack" not in str(err.value)


def test_llamaindex_on_qdrant_words_a_mismatch_as_qdrant(tmp_path):
    # Qdrant's calls, not the default store's (Chroma's).
    tiny = tiny_embedder()
    other = tiny.contract.with_(normalize=not tiny.contract.normalize)
    qdrant = ctxemb_qdrant.connect(tmp_path / "qdrant")
    ctxemb_qdrant.open_collection(qdrant, "docs", tiny)
    with pytest.raises(ContractMismatchError) as err:
        ContractQdrantVectorStore("docs", ContractEmbedding(other), client=qdrant)
    assert "ctxemb_qdrant.migrate(" in str(err.value)
    assert "ctxemb_chroma" not in str(err.value)
    qdrant.close()
