"""Against the published reference: every STS-B test sentence, ctxemb vs sentence-transformers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxemb_core import Embedder
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.eval.sts import cosine_scores, load_sts, spearman

PUBLISHED = "sentence-transformers__all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def sts(data_dir):
    return load_sts(data_dir / "stsbenchmark" / "sts-test.csv")


@pytest.fixture(scope="module")
def sentences(sts) -> list[str]:
    return list(dict.fromkeys(sts.sentences1 + sts.sentences2))


@pytest.fixture(scope="module")
def ours(minilm_contract, sts) -> tuple[np.ndarray, np.ndarray]:
    """ctxemb's vectors of each pair as STS is evaluated: the first sentences as queries, the
    second as documents (MiniLM has no role prefixes: either role gives a sentence's vector).

    Through the run's embedding cache: in the evaluation-set worker (tests/conftest.py) the
    vectors ``ctxemb eval --task sts`` embedded with this checkout are read back, not embedded
    again; run alone, this module embeds them itself.
    """
    with EmbeddingCache() as cache:
        embedder = Embedder(minilm_contract, cache=cache)
        return embedder.embed_queries(sts.sentences1), embedder.embed_documents(sts.sentences2)


def test_vectors_equal_sentence_transformers_on_every_sts_sentence(ours, sentences, sts, st_minilm):
    theirs = st_minilm.encode(sentences, batch_size=32, normalize_embeddings=True)
    row = {s: i for i, s in enumerate(sentences)}
    assert len(sentences) > 2500
    for vectors, texts in zip(ours, (sts.sentences1, sts.sentences2), strict=True):
        reference = theirs[[row[s] for s in texts]]
        cos = (
            (vectors * reference).sum(axis=1)
            / np.linalg.norm(reference, axis=1)
            / np.linalg.norm(vectors, axis=1)
        )
        assert cos.min() >= 0.99999, f"min cosine {cos.min():.8f}"


def test_sts_spearman_reproduces_the_published_score(ours, sts, data_dir):
    a, b = ours
    got = spearman(cosine_scores(a, b), sts.scores)
    folder = next((data_dir / "mteb_results" / PUBLISHED).iterdir())
    published = json.loads((folder / "STSBenchmark.json").read_text())
    expected = published["scores"]["test"][0]["cosine_spearman"]
    assert abs(got - expected) <= 0.0005, f"spearman {got:.5f} vs published {expected:.5f}"
