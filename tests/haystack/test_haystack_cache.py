"""The Haystack embedders' ``cache`` option: a serialised flag that leaves the fingerprint alone,
vectors read back bit-identical by a new component, and a pickled LazyEmbedder that keeps it."""

from __future__ import annotations

import json
import os
import pickle

import pytest
from conftest import DOCS
from haystack import Document

from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.errors import InvalidInputError
from ctxemb_haystack import ContractDocumentEmbedder, ContractTextEmbedder

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")


@pytest.mark.parametrize("kind", [ContractDocumentEmbedder, ContractTextEmbedder])
def test_cache_is_a_serialised_flag_that_leaves_the_fingerprint_alone(minilm_contract, kind):
    plain = kind(contract=minilm_contract)
    cached = kind(contract=minilm_contract, cache=True)
    assert plain.to_dict()["init_parameters"]["cache"] is False and plain.lazy.cache is None
    data = cached.to_dict()
    assert data["init_parameters"]["cache"] is True
    assert json.loads(json.dumps(data)) == data
    back = kind.from_dict(data)
    assert back.to_dict() == data and isinstance(back.lazy.cache, EmbeddingCache)
    assert cached.fingerprint == plain.fingerprint == minilm_contract.fingerprint
    # An older YAML without the key loads as before: no cache.
    del data["init_parameters"]["cache"]
    assert kind.from_dict(data).lazy.cache is None
    with pytest.raises(InvalidInputError, match="cache"):
        kind(contract=minilm_contract, cache="yes")


def test_a_second_embed_of_the_same_texts_reads_the_cache(minilm_contract):
    documents = [Document(id=k, content=v) for k, v in DOCS.items()]
    plain = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False)
    want = [d.embedding for d in plain.run(documents)["documents"]]
    cached = ContractDocumentEmbedder(contract=minilm_contract, progress_bar=False, cache=True)
    cache = cached.lazy.cache
    assert cache is not None
    cached.run(documents)
    before = cache.stats()
    # A new component (as a pipeline loaded from YAML makes) reads the same file.
    again = ContractDocumentEmbedder.from_dict(cached.to_dict())
    got = [d.embedding for d in again.run(documents)["documents"]]
    assert got == want  # bit-identical to embedding without a cache
    assert again.lazy.cache is not None and again.lazy.cache.stats().hits == len(DOCS)
    assert cache.stats().misses == before.misses
    query = ContractTextEmbedder(contract=minilm_contract, cache=True)
    first = query.run("how are green tea leaves processed")["embedding"]
    assert query.run("how are green tea leaves processed")["embedding"] == first
    assert query.lazy.cache is not None and query.lazy.cache.stats().hits == 1


def test_a_pickled_lazy_embedder_keeps_its_cache(minilm_contract, tmp_path):
    from ctxemb_core.lazy import LazyEmbedder

    lazy = LazyEmbedder(minilm_contract, cache=EmbeddingCache(tmp_path / "c.sqlite3"))
    copy = pickle.loads(pickle.dumps(lazy))
    assert copy.cache is not None and copy.cache.path == tmp_path / "c.sqlite3"
    assert copy.config == lazy.config  # the cache is not part of the configuration
    assert LazyEmbedder(minilm_contract).cache is None
    assert isinstance(LazyEmbedder(minilm_contract, cache=True).cache, EmbeddingCache)
    with pytest.raises(InvalidInputError, match="cache"):
        LazyEmbedder(minilm_contract, cache=1)
    built = LazyEmbedder(minilm_contract)
    built.get()
    built.cache = copy.cache  # reaches the Embedder already built
    assert built.get().cache is copy.cache
    built.cache = None
    assert built.get().cache is None
