"""LangChain on Qdrant: ContractQdrant (a ``langchain_qdrant.QdrantVectorStore`` on a stamped
collection) passes LangChain's standard vector-store suite in Qdrant's local mode, refuses another
contract, and shares its collection with ``langchain_qdrant``'s own ``QdrantVectorStore``, which
reads its points; that store's own writes there are caught, and a collection it made is adopted
only once its points prove the contract."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import fresh_name
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_qdrant import QdrantVectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests
from qdrant_client import models

import ctxemb_qdrant
from ctxemb_core import contract_for
from ctxemb_core.errors import (
    ContractMismatchError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_core.static import static_from_vectors
from ctxemb_core.testing.conformance import _WORDS, tiny_embedder
from ctxemb_langchain import ContractEmbeddings, ContractQdrant

TEXTS = ["green tea is steamed", "chains like oil", "the moon orbits"]


@functools.cache
def suite_embeddings() -> ContractEmbeddings:
    """A static model built in code that knows the suite's words (foo, bar, baz, new) besides
    the canary's: the suite's checks need ``foo`` nearer ``baz`` than ``bar``, and the bundled
    MiniLM would cost the suite's 25 opens ~25 CPU-s more (its canary embedded on each)."""
    rng = np.random.default_rng(7)
    words = {w: rng.normal(size=16) for w in _WORDS}
    words |= {"foo": np.eye(16)[0], "baz": np.eye(16)[0] + 0.5 * np.eye(16)[1]}
    words |= {"bar": np.eye(16)[2], "new": np.eye(16)[3]}
    folder = Path(tempfile.mkdtemp(prefix="ctxemb-lc-suite-"))
    lines = [w + " " + " ".join(f"{x:.5f}" for x in v) for w, v in words.items()]
    (folder / "vectors.txt").write_text("\n".join(lines), encoding="utf-8")
    model = static_from_vectors(folder / "vectors.txt", folder / "model")
    return ContractEmbeddings(contract_for(model, name="ctxemb/langchain-suite-static"))


class TestContractQdrant(VectorStoreIntegrationTests):
    @staticmethod
    def get_embeddings() -> Embeddings:
        return suite_embeddings()

    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        # sample=0: a new collection has no points to sample; the stamp is still verified.
        name = fresh_name()
        yield ContractQdrant(None, name, self.get_embeddings(), location=":memory:", sample=0)


@pytest.fixture
def tiny() -> ContractEmbeddings:
    """A tiny static model's embeddings (no torch): what these checks need of a contract."""
    return ContractEmbeddings(tiny_embedder().contract)


def test_the_collection_is_shared_with_langchain_qdrants_own_store(tiny, tmp_path):
    store = ContractQdrant(None, "docs", tiny, path=str(tmp_path))
    store.add_texts(TEXTS, [{"n": i} for i in range(3)], ids=["tea", "oil", "moon"])
    assert isinstance(store, QdrantVectorStore)
    assert store.client is ctxemb_qdrant.connect(tmp_path)  # the folder's one client
    found = store.similarity_search_with_score("green tea", k=1, filter={"n": 0})
    assert [d.id for d, _ in found] == ["tea"] and 0 <= found[0][1] < 1
    # Points as QdrantVectorStore lays them out: its own store reads them (Dot: the contract's).
    plain = QdrantVectorStore(store.client, "docs", tiny, distance=models.Distance.DOT)
    assert plain.similarity_search("green tea", k=1)[0].page_content == "green tea is steamed"
    with pytest.raises(ContractMismatchError) as refused:
        ContractQdrant(store.client, "docs", ContractEmbeddings(tiny.contract.with_(pooling="cls")))
    assert refused.value.fields == ("pooling",)
    # Its own writes go around the guard: the next open re-embeds them and refuses another
    # model's vectors.
    other = ContractEmbeddings(tiny.contract.with_(normalize=False))
    QdrantVectorStore(store.client, "docs", other, distance=models.Distance.DOT).add_texts(
        ["the moon is bright"]
    )
    with pytest.raises(ForeignVectorsError):
        ContractQdrant(store.client, "docs", tiny)


def test_a_collection_langchain_qdrant_made_is_adopted_only_when_its_points_prove_it(tiny):
    client = ctxemb_qdrant.connect(memory=True)
    # What a LangChain user's own store made: its Cosine collection, its points, no stamp.
    vectors = models.VectorParams(size=16, distance=models.Distance.COSINE)
    client.create_collection("own", vectors_config=vectors)
    QdrantVectorStore(client, "own", tiny).add_texts(TEXTS)
    with pytest.raises(MissingStampError):
        ContractQdrant(client, "own", tiny)
    with pytest.raises(MissingStampError, match="cannot adopt"):  # not another contract's
        ContractQdrant(
            client, "own", ContractEmbeddings(tiny.contract.with_(pooling="max")), adopt=True
        )
    adopted = ContractQdrant(client, "own", tiny, adopt=True)
    assert adopted.similarity_search("green tea", k=1)[0].page_content == "green tea is steamed"


def test_one_place_is_named(tiny):
    with pytest.raises(InvalidInputError, match="exactly one of"):
        ContractQdrant(None, "docs", tiny)
    with pytest.raises(InvalidInputError, match="exactly one of"):
        ContractQdrant(None, "docs", tiny, location=":memory:", path="./qdrant")
