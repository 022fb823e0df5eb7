"""One SciFact corpus written by three adapters, read through LangChain under one contract.

Issue 11's "Done means": for the same 50 SciFact test queries, a collection written by
``ctxemb_chroma``, one written by the Haystack adapter and one written by the LangChain adapter
return the same top-10 ids through LangChain under the same contract, and each is refused under a
contract that differs in any one field.

The queries are the first 50 of ``qrels/test.tsv`` (BEIR order). To keep CI time reasonable the
corpus is not all 5,183 documents: it is every document judged for those 50 queries plus the first
documents of the corpus file, up to 1,000 in all (in corpus order; text = ``document_text``, BEIR's
``title + " " + text``). The three collections live in one embedded Chroma folder. No mocks: the
bundled MiniLM, a real Haystack indexing pipeline, ``ContractChroma`` for the LangChain side.

Marked slow. The three writers embed through the run's embedding cache (``cache=True``, keyed by
the contract's fingerprint, the role and the text): the first path of the run that embeds a
document computes its vector, the others read it back (tests/conftest.py runs the evaluation-set
tests in one worker, the ``ctxemb eval`` runs over the whole of SciFact first). A writer that
embedded another text, or under another role or contract, would miss the cache and write vectors
of its own, and the top-10 would differ. Embedding the corpus three times, without the cache, took
100 s on two idle CPU cores; the searches and the 24 refusals take a few seconds.
"""

from __future__ import annotations

import os
from typing import Any

import chromadb
import numpy as np
import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

pytest.importorskip("haystack")
pytest.importorskip("haystack_integrations.document_stores.chroma")

from haystack import Document as HaystackDocument
from haystack import Pipeline
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_chroma import open_collection
from ctxemb_core import contract_for
from ctxemb_core.errors import ContractMismatchError
from ctxemb_core.eval import document_text, load_beir
from ctxemb_haystack import ContractDocumentEmbedder, ContractDocumentWriter
from ctxemb_langchain import ContractChroma, ContractEmbeddings

N_QUERIES = 50
N_DOCUMENTS = 1000
K = 10

# The long abstracts are cut at the contract's max_tokens by design (also when a store is opened
# and a sample of its records is re-embedded).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning"),
]
WRITERS = ("ctxemb_chroma", "haystack", "langchain")

#: One change per field that can differ; ``model`` is a tiny model built in code (below).
CHANGES: dict[str, dict[str, Any]] = {
    "pooling": {"pooling": "cls"},
    "normalize": {"normalize": False},
    "query_prefix": {"query_prefix": "query: "},
    "document_prefix": {"document_prefix": "passage: "},
    "truncate_dim": {"truncate_dim": 128},
    "max_tokens": {"max_tokens": 128},
    "precision": {"precision": "float16"},
}


@pytest.fixture(scope="module")
def scifact(data_dir) -> tuple[list[tuple[str, str]], list[str], list[str], dict[str, Any]]:
    """The 50 queries (id, text), the corpus ids and texts (judged first-50 docs + head), qrels."""
    dataset = load_beir(data_dir / "scifact", split="test")
    queries = list(dataset.queries.items())[:N_QUERIES]
    judged = {doc for qid, _ in queries for doc in dataset.qrels[qid]}
    assert len(judged) < N_DOCUMENTS
    # Every judged document, wherever it sits in the file, and the head of the corpus beside them.
    head = N_DOCUMENTS - len(judged)
    ids: list[str] = []
    for doc_id in dataset.corpus:
        if doc_id in judged:
            ids.append(doc_id)
        elif head > 0:
            ids.append(doc_id)
            head -= 1
    assert len(ids) == N_DOCUMENTS and judged <= set(ids)
    return queries, ids, [document_text(dataset.corpus[i]) for i in ids], dataset.qrels


@pytest.fixture(scope="module")
def emb(minilm_contract) -> ContractEmbeddings:
    """One ContractEmbeddings (and its Embedder) for the module: the model loads once."""
    return ContractEmbeddings(minilm_contract, cache=True)


@pytest.fixture(scope="module")
def written(scifact, emb, tmp_path_factory) -> tuple[Any, dict[str, str]]:
    """One embedded Chroma folder holding the corpus three times, once per writer."""
    _, ids, texts, _ = scifact
    path = tmp_path_factory.mktemp("three-adapters")
    client = chromadb.PersistentClient(path=str(path))
    names = {writer: f"scifact_{writer}" for writer in WRITERS}
    collection = open_collection(client, names["ctxemb_chroma"], emb.embedder)
    assert collection.add_missing(ids, texts) == N_DOCUMENTS

    store = ChromaDocumentStore(collection_name=names["haystack"], persist_path=str(path))
    pipe = Pipeline()
    pipe.add_component(
        "embedder", ContractDocumentEmbedder(contract=emb.contract, progress_bar=False, cache=True)
    )
    pipe.add_component("writer", ContractDocumentWriter(store))
    pipe.connect("embedder.documents", "writer.documents")
    documents = [HaystackDocument(id=i, content=t) for i, t in zip(ids, texts, strict=True)]
    out = pipe.run({"embedder": {"documents": documents}})
    assert out["writer"]["documents_written"] == N_DOCUMENTS

    langchain = ContractChroma(names["langchain"], emb, client=client)
    assert langchain.add_texts(texts, ids=ids) == ids
    return client, names


def snapshot(client: Any, name: str) -> tuple[dict[str, Any], list[str], list[Any], bytes]:
    """A collection's stamp and records as the store has them (read around ctxemb)."""
    raw = client.get_collection(name, embedding_function=None)
    got = raw.get(include=["documents", "metadatas", "embeddings"])
    vectors = np.asarray(got["embeddings"], dtype=np.float32).tobytes()
    return dict(raw.metadata or {}), got["ids"], [got["documents"], got["metadatas"]], vectors


def test_the_three_collections_give_the_same_top_10_through_langchain(scifact, emb, written):
    queries, ids, _, qrels = scifact
    client, names = written
    for name in names.values():
        assert client.get_collection(name, embedding_function=None).count() == len(ids)
    stores = {
        writer: ContractChroma(name, emb, client=client, create_collection_if_not_exists=False)
        for writer, name in names.items()
    }
    top: dict[str, list[list[str]]] = {writer: [] for writer in WRITERS}
    for _, text in queries:
        for writer, store in stores.items():
            found = store.similarity_search(text, k=K)
            assert len(found) == K
            top[writer].append([d.id for d in found])
    reference = top["ctxemb_chroma"]
    for writer in ("haystack", "langchain"):
        differing = [
            qid for (qid, _), a, b in zip(queries, reference, top[writer], strict=True) if a != b
        ]
        assert differing == [], f"{writer}: top-{K} differs from ctxemb_chroma's for {differing}"
    # Real retrieval, not an artefact of a broken index: most queries find a judged document.
    hits = sum(
        bool(set(r) & set(qrels[qid])) for (qid, _), r in zip(queries, reference, strict=True)
    )
    assert hits >= 0.7 * N_QUERIES, hits


def _other_contracts(minilm_contract, tiny_st_factory) -> list[tuple[str, Any]]:
    others = [(field, minilm_contract.with_(**change)) for field, change in CHANGES.items()]
    others.append(("model", contract_for(tiny_st_factory())))
    return others


@pytest.mark.parametrize("writer", WRITERS)
def test_each_collection_is_refused_under_a_contract_differing_in_any_one_field(
    written, minilm_contract, tiny_st_factory, writer
):
    client, names = written
    name = names[writer]
    before = snapshot(client, name)
    collections = sorted(c.name for c in client.list_collections())
    others = _other_contracts(minilm_contract, tiny_st_factory)
    assert {field for field, _ in others} == {*CHANGES, "model"}
    for field, other in others:
        with pytest.raises(ContractMismatchError) as info:
            ContractChroma(
                name,
                ContractEmbeddings(other),
                client=client,
                create_collection_if_not_exists=False,
            )
        assert field in info.value.fields, (field, info.value.fields)
        if field != "model":
            assert info.value.fields == (field,)
        assert info.value.index == minilm_contract and info.value.caller == other
        assert snapshot(client, name) == before, f"{field}: the collection changed"
        assert sorted(c.name for c in client.list_collections()) == collections
