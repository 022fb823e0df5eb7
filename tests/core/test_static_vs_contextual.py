"""Static vs contextual, shown (issue 16, item 4): "bank" of a river and "bank" that lends money.

A static embedding is a function of a word type: every occurrence of "bank" has the one row of the
table. A contextual embedding is a function of a token occurrence: each "bank" has its own vector,
closer to the same sense's than to the other's. ``word_vector`` states how an occurrence's vector
was made (``pieces``) and how occurrences were combined (``aggregate``), and a pooled text vector
is not a word's vector (the seed's failure mode "a word's vector looks like a sentence summary").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from conftest import MINILM

from ctxemb_core import Embedder, contract_for
from ctxemb_core.backends.static import read_safetensors
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.static import static_from_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "static_vs_contextual.py"


def _example():
    spec = importlib.util.spec_from_file_location("static_vs_contextual", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _example()


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return static_from_model(MINILM, tmp_path_factory.mktemp("svc") / "minilm-static")


@pytest.fixture(scope="module")
def static(static_dir: Path) -> Embedder:
    return Embedder(contract_for(static_dir))


@pytest.fixture(scope="module")
def contextual() -> Embedder:
    return Embedder(contract_for(MINILM))


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_a_static_word_has_one_vector_in_every_context(static, static_dir):
    from tokenizers import Tokenizer

    vectors = [static.word_vector("bank", [t]).vector for t in example.RIVER + example.MONEY]
    for v in vectors[1:]:
        assert np.array_equal(v, vectors[0])
    # It is the table's row for the word piece "bank": a function of the type alone.
    table = read_safetensors(static_dir / "model.safetensors", ["embeddings"])["embeddings"]
    row = table[Tokenizer.from_file(str(static_dir / "tokenizer.json")).token_to_id("bank")]
    np.testing.assert_array_equal(vectors[0], row)
    tokens = static.embed_tokens(example.RIVER[0])
    assert tokens.tokens[:4] == ["we", "sat", "on", "the"]  # no [CLS]: lookups only
    # For a static model a one-word text is that word's vector, normalised.
    np.testing.assert_allclose(
        static.embed_documents(["bank"])[0], row / np.linalg.norm(row), atol=1e-6
    )


def test_a_contextual_word_has_one_vector_per_occurrence(contextual):
    river = [contextual.word_vector("bank", [t]) for t in example.RIVER]
    money = [contextual.word_vector("bank", [t]) for t in example.MONEY]
    assert _cos(river[0].vector, money[0].vector) < 0.9
    same = [_cos(a.vector, b.vector) for g in (river, money) for a in g for b in g if a is not b]
    across = [_cos(a.vector, b.vector) for a in river for b in money]
    assert min(same) > max(across)  # measured 0.832 > 0.798 (MiniLM)


def test_word_vector_states_both_aggregations(contextual, static):
    for embedder in (contextual, static):
        one = embedder.word_vector("bank", [example.RIVER[0]])
        assert (one.pieces, one.aggregate, one.occurrences) == ("mean", "mean", 1)
        six = embedder.word_vector("bank", example.RIVER + example.MONEY, "median")
        assert (six.aggregate, six.occurrences) == ("median", 6)
    # A word of several word pieces: their mean, or the first piece's vector, as asked.
    text = "The results were unbelievably good."
    pieces = contextual.embed_tokens(text)
    span = pieces.span(text.index("unbelievably"), text.index(" good"))
    assert len(span) > 1
    mean = contextual.word_vector("unbelievably", [text])
    first = contextual.word_vector("unbelievably", [text], pieces="first")
    np.testing.assert_allclose(mean.vector, pieces.vectors[span].mean(axis=0), atol=1e-6)
    np.testing.assert_array_equal(first.vector, pieces.vectors[span[0]])
    assert first.pieces == "first" and not np.allclose(first.vector, mean.vector)
    with pytest.raises(InvalidInputError, match=r"pieces='max' is not valid.*'mean', 'first'"):
        contextual.word_vector("bank", ["a bank"], pieces="max")


def test_a_text_vector_is_not_a_word_vector(contextual):
    word = contextual.word_vector("bank", [example.RIVER[0]]).vector
    sentence = contextual.embed_documents([example.RIVER[0]])[0]
    alone = contextual.embed_documents(["bank"])[0]
    # The sentence's pooled vector summarises every token; the word alone is another text.
    assert _cos(sentence, word) < 0.8
    assert _cos(alone, word) < 0.9
    assert sentence.shape == word.shape  # same width: only the unit tells them apart


def test_the_example_prints_what_the_tests_check(static_dir, capsys):
    results = example.main(["--static", str(static_dir)])
    out = capsys.readouterr().out
    assert results["static"]["identical"] and not results["contextual"]["identical"]
    assert results["static"]["cosine"] == pytest.approx(1.0, abs=1e-6)
    assert results["contextual"]["same_sense"][0] > results["contextual"]["across_senses"][1]
    assert "pieces='mean' (the mean of the word's word-piece vectors)" in out
    assert "identical arrays: True" in out and "identical arrays: False" in out
    assert "occurrences=6 (a derived statistic, not a model output)" in out
