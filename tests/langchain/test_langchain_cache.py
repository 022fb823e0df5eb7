"""``ContractEmbeddings``' ``cache`` option: vectors read back bit-identical by another instance or
a pickled copy, ``True`` for the default cache, any other value refused."""

from __future__ import annotations

import pickle

import pytest
from conftest import DOCS

from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.errors import InvalidInputError
from ctxemb_langchain import ContractEmbeddings


def test_a_second_embed_of_the_same_texts_reads_the_cache(minilm_contract, tmp_path):
    texts = list(DOCS.values())
    want = ContractEmbeddings(minilm_contract).embed_documents(texts)
    cache = EmbeddingCache(tmp_path / "c.sqlite3")
    cached = ContractEmbeddings(minilm_contract, cache=cache)
    assert cached.fingerprint == minilm_contract.fingerprint
    assert cached.embed_documents(texts) == want
    assert cache.stats().misses == len(texts) and cache.stats().hits == 0
    # Another instance on the same cache (or a pickled copy) reads what the first stored.
    for again in (
        ContractEmbeddings(minilm_contract, cache=cache),
        pickle.loads(pickle.dumps(cached)),
    ):
        assert again.embed_documents(texts) == want  # bit-identical
    assert cache.stats().misses == len(texts)
    assert cache.stats().hits == len(texts)  # this instance's; the pickled copy counts its own
    query = cached.embed_query("how are green tea leaves processed")
    assert cached.embed_query("how are green tea leaves processed") == query
    assert cache.stats().hits == len(texts) + 1


def test_cache_true_is_the_default_cache_and_other_values_are_refused(minilm_contract):
    assert ContractEmbeddings(minilm_contract).lazy.cache is None
    default = ContractEmbeddings(minilm_contract, cache=True).lazy.cache
    assert isinstance(default, EmbeddingCache) and default.path == EmbeddingCache().path
    with pytest.raises(InvalidInputError, match="cache"):
        ContractEmbeddings(minilm_contract, cache="yes")
