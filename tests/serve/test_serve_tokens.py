"""``ctxemb serve`` tokenises a text once and applies the precision step once (issue 44, item 7).

The usage a request reports, the batch plan and the forward pass all read the one tokenisation
:meth:`Embedder.tokenize` makes; the vectors are the in-process Embedder's, bit for bit, before
the precision step and after it (int8 here, with a query prefix so that the role's prefix is
added once too).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest
from embedding_server import post, serving

from ctxemb_core import Embedder
from ctxemb_core.errors import InvalidInputError

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

TEXTS = ["a cat sat on the mat", "Café prices rose 3.5% in 2024", "tea " * 300, "short"]


class _Counting:
    """A tokenizer pipeline that counts the texts it encodes."""

    def __init__(self, inner: Any, counted: list[int]) -> None:
        self._inner, self._counted = inner, counted

    def encode_batch(self, texts: Any, *args: Any, **kwargs: Any) -> Any:
        self._counted.append(len(texts))
        return self._inner.encode_batch(texts, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def counted(minilm_contract, monkeypatch):
    """An int8 embedder with a query prefix, its tokenizer's encoded texts counted."""
    embedder = Embedder(minilm_contract.with_(precision="int8", query_prefix="query: "))
    tokenizer = embedder.tokenize(["x"], "query").tokenizer
    pipeline = tokenizer._pipeline
    counts: list[int] = []
    monkeypatch.setattr(
        tokenizer, "_pipeline", lambda *a, **k: _Counting(pipeline(*a, **k), counts)
    )
    return embedder, counts


def _rows(payload: dict[str, Any], dtype: Any) -> np.ndarray:
    rows = sorted(payload["data"], key=lambda d: d["index"])
    if isinstance(rows[0]["embedding"], str):
        return np.stack([np.frombuffer(base64.b64decode(r["embedding"]), "<f4") for r in rows])
    return np.array([r["embedding"] for r in rows], dtype=dtype)


@pytest.mark.heavy  # a server started
def test_a_served_text_is_tokenized_once_and_its_vector_is_the_embedders(counted):
    embedder, counts = counted
    expected = {
        "query": embedder.embed_queries(TEXTS),
        "document": embedder.embed_documents(TEXTS),
    }
    raw = embedder.embed_float(TEXTS, "query", warn=False)
    with serving(embedder) as service:
        url, model = service.url + "/v1/embeddings", embedder.contract.model
        for role in ("query", "document"):
            counts.clear()
            body = {"model": model, "input": TEXTS, "input_type": role}
            status, _, answer = post(url, body)
            assert status == 200, answer
            assert sum(counts) == len(TEXTS)  # counted, planned and embedded from one encoding
            vectors = _rows(answer, np.int8)
            np.testing.assert_array_equal(vectors, expected[role])  # int8, quantized once
            usage = embedder.token_counts(TEXTS, role)
            assert answer["usage"]["prompt_tokens"] == int(usage.sum())
        # The vectors before the precision step, as ctxemb's client asks for them.
        body = {
            "model": model,
            "input": TEXTS,
            "input_type": "query",
            "precision": "float32",
            "encoding_format": "base64",
        }
        status, _, answer = post(url, body)
        assert status == 200, answer
        np.testing.assert_array_equal(_rows(answer, np.float32), raw)


def test_tokens_are_embedded_only_under_the_role_they_were_made_for(counted):
    embedder, _ = counted
    tokens = embedder.tokenize(TEXTS[:2], "query")
    np.testing.assert_array_equal(
        embedder.embed_float(tokens, "query"), embedder.embed_float(TEXTS[:2], "query")
    )
    with pytest.raises(InvalidInputError, match="tokenized for another role"):
        embedder.embed_float(tokens, "document")  # the query prefix is in these tokens
    with pytest.raises(InvalidInputError, match="tokenized for another role"):
        Embedder(embedder.contract.with_(query_prefix="q: ")).embed_float(tokens, "query")
