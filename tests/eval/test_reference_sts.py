"""Against the published reference: every STS-B test sentence, ctxemb vs sentence-transformers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxemb_core.eval.sts import cosine_scores, load_sts, spearman

PUBLISHED = "sentence-transformers__all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def sts(data_dir):
    return load_sts(data_dir / "stsbenchmark" / "sts-test.csv")


@pytest.fixture(scope="module")
def sentences(sts) -> list[str]:
    return list(dict.fromkeys(sts.sentences1 + sts.sentences2))


@pytest.fixture(scope="module")
def ours(minilm, sentences) -> np.ndarray:
    return minilm.embed_documents(sentences)


def test_vectors_equal_sentence_transformers_on_every_sts_sentence(ours, sentences, st_minilm):
    theirs = st_minilm.encode(sentences, batch_size=32, normalize_embeddings=True)
    cos = (
        (ours * theirs).sum(axis=1) / np.linalg.norm(theirs, axis=1) / np.linalg.norm(ours, axis=1)
    )
    assert len(sentences) > 2500
    assert cos.min() >= 0.99999, f"min cosine {cos.min():.8f}"


def test_sts_spearman_reproduces_the_published_score(ours, sentences, sts, data_dir):
    row = {s: i for i, s in enumerate(sentences)}
    a = ours[[row[s] for s in sts.sentences1]]
    b = ours[[row[s] for s in sts.sentences2]]
    got = spearman(cosine_scores(a, b), sts.scores)
    folder = next((data_dir / "mteb_results" / PUBLISHED).iterdir())
    published = json.loads((folder / "STSBenchmark.json").read_text())
    expected = published["scores"]["test"][0]["cosine_spearman"]
    assert abs(got - expected) <= 0.0005, f"spearman {got:.5f} vs published {expected:.5f}"
