"""``ContractRetriever`` checks the query vector it is given before any store sees it.

A query vector carries no contract of its own: the fingerprint beside it says which contract it
claims, and the store's stamp is checked against that. What the vector itself must be (present,
one row of numbers, finite, of the contract's width) is checked in ``ctxemb_core``
(``guard.check_query_vector``), on the in-memory store, an embedded Chroma path and a Chroma
server alike. Before this check a NaN vector returned documents scored NaN and ``None`` failed
inside Haystack with ``TypeError: object of type 'NoneType' has no len()``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import DOCS, fresh_name
from haystack import Document
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever
from haystack_integrations.document_stores.chroma import ChromaDocumentStore

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import check_query_vector
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
)


@pytest.fixture(params=["memory", "chroma-embedded", "chroma-server"])
def retriever(request, minilm_contract, tmp_path):
    """A ContractRetriever over a store of each kind holding the test documents."""
    if request.param == "memory":
        store, cls = InMemoryDocumentStore(), InMemoryEmbeddingRetriever
    elif request.param == "chroma-embedded":
        store = ChromaDocumentStore(collection_name=fresh_name(), persist_path=str(tmp_path))
        cls = ChromaEmbeddingRetriever
    else:
        port = request.getfixturevalue("server")
        store = ChromaDocumentStore(collection_name=fresh_name(), host="127.0.0.1", port=port)
        cls = ChromaEmbeddingRetriever
    docs = [Document(id=k, content=v) for k, v in DOCS.items()]
    embedded = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False).run(docs)
    ContractDocumentWriter(store).run(embedded["documents"])
    return ContractRetriever(cls(store, top_k=3))


@pytest.fixture(scope="module")
def query(minilm_contract):
    return ContractTextEmbedder(contract=minilm_contract).run("green tea")


BAD_VECTORS = [
    ("nan", lambda v: [math.nan] * len(v), r"query_embedding holds NaN or infinite"),
    ("one inf", lambda v: [*v[:-1], math.inf], r"NaN or infinite values \(component 383\)"),
    ("float32 overflow", lambda v: [1e300, *v[1:]], r"NaN or infinite values \(component 0\)"),
    ("none", lambda v: None, r"query_embedding is missing"),
    ("short", lambda v: v[:100], r"100 components.*384"),
    ("2-D", lambda v: [v], r"shape \(1, 384\).*384"),
    ("empty", lambda v: [], r"0 components.*384"),
    ("text", lambda v: ["a"] * len(v), r"not a list of numbers"),
    ("a string", lambda v: "green tea", r"not a list of numbers.*str"),
]


@pytest.mark.parametrize(
    ("label", "spoil", "message"), BAD_VECTORS, ids=[b[0] for b in BAD_VECTORS]
)
def test_a_bad_query_vector_with_the_stores_fingerprint_is_refused(
    retriever, query, label, spoil, message
):
    with pytest.raises(InvalidInputError, match=message):
        retriever.run(query_embedding=spoil(query["embedding"]), fingerprint=query["fingerprint"])


def test_the_right_vector_still_retrieves_finite_scores(retriever, query):
    found = retriever.run(query_embedding=query["embedding"], fingerprint=query["fingerprint"])
    documents = found["documents"]
    assert documents[0].id == "tea"
    assert all(np.isfinite(d.score) for d in documents)
    # A numpy vector is a list of numbers too.
    again = retriever.run(
        query_embedding=np.asarray(query["embedding"]), fingerprint=query["fingerprint"]
    )["documents"]
    assert [d.id for d in again] == [d.id for d in documents]


def test_check_query_vector_without_a_known_width_checks_shape_and_finiteness():
    assert check_query_vector([1, 2.5], None) == [1.0, 2.5]
    with pytest.raises(InvalidInputError, match="NaN"):
        check_query_vector([1.0, math.nan], None)
    with pytest.raises(InvalidInputError, match="one vector"):
        check_query_vector([[1.0, 2.0]], None)
