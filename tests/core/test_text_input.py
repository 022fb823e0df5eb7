"""Every entry point that takes texts answers bad ones with InvalidInputError naming the argument
and the bad item's index, never with a TypeError from the tokenizer; valid Unicode is embedded.

Run against the real bundled MiniLM (ONNX Runtime) and a tiny BERT with E5 prefixes (torch), so
both tokenizers and both backends see the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxemb_core import Embedder, contract_for
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.errors import CtxembError, InvalidInputError

FP = "f" * 64


@pytest.fixture(scope="module", params=["minilm", "tiny"])
def embedder(request: pytest.FixtureRequest, tiny_bert: Path) -> Embedder:
    if request.param == "minilm":
        return request.getfixturevalue("minilm")
    return Embedder(contract_for(tiny_bert, pooling="mean", family="e5"), backend="torch")


@pytest.fixture
def cache(tmp_path: Path):
    with EmbeddingCache(tmp_path / "cache.sqlite3") as c:
        yield c


def _width(value: Any) -> int:
    try:
        return max(len(value), 1)
    except TypeError:
        return 1


# Each batch entry point, called with the bad value where its batch goes, and the argument's name.
BATCH_CALLS: dict[str, tuple[str, Callable[[Embedder, EmbeddingCache, Any], object]]] = {
    "embed_documents": ("texts", lambda e, c, v: e.embed_documents(v)),
    "embed_queries": ("texts", lambda e, c, v: e.embed_queries(v)),
    "embed": ("texts", lambda e, c, v: e.embed(v, "query")),
    "embed_float": ("texts", lambda e, c, v: e.embed_float(v, "document")),
    "word_vector": ("contexts", lambda e, c, v: e.word_vector("cat", v)),
    "cache.get_many": ("texts", lambda e, c, v: c.get_many(FP, "document", v)),
    "cache.put_many": (
        "texts",
        lambda e, c, v: c.put_many(FP, "document", v, np.zeros((_width(v), 4), np.float32)),
    ),
}

# (bad batch, what the message must say after the argument's name)
BAD_BATCHES: dict[str, tuple[Callable[[], Any], str]] = {
    "None": (lambda: None, r" must be a list of strings, got NoneType"),
    "one string": (lambda: "a cat", r" must be a list of strings, got one string"),
    "bytes": (lambda: b"a cat", r" must be a list of strings, got bytes; decode"),
    "bytearray": (lambda: bytearray(b"a cat"), r" must be a list of strings, got bytearray"),
    "generator": (lambda: (t for t in ["a cat"]), r" .*generator, a one-shot iterator"),
    "iterator": (lambda: iter(["a cat"]), r" .*list_iterator, a one-shot iterator"),
    "numpy array": (lambda: np.array(["a cat", "a dog"]), r" .*numpy ndarray; pass .tolist"),
    "dict": (lambda: {"a cat": "a dog"}, r" .*got dict; pass list"),
    "set": (lambda: {"a cat"}, r" must be a list of strings, got set"),
    "int": (lambda: 5, r" must be a list of strings, got int"),
    "None item": (lambda: ["a cat", None], r"\[1\] is NoneType, not a string"),
    "int item": (lambda: ["a cat", "a dog", 3], r"\[2\] is int, not a string"),
    "bytes item": (lambda: ["a cat", b"a dog"], r"\[1\] is bytes, not a string"),
    "list item": (lambda: [["a cat"]], r"\[0\] is list, not a string"),
    "lone high surrogate": (lambda: ["a cat", "\ud800"], r"\[1\] is not valid Unicode.*U\+D800"),
    "lone low surrogate": (lambda: ["ok", "ok", "a\udfffb"], r"\[2\] .*U\+DFFF at character 1"),
    "split UTF-16 pair": (lambda: ["\ud83d\ude00 cat"], r"\[0\] .*2 surrogate code point"),
    "surrogateescape": (
        lambda: ["a cat", b"caf\xe9".decode("utf-8", "surrogateescape")],
        r"\[1\] .*U\+DCE9 at character 3",
    ),
}


@pytest.mark.parametrize("bad", list(BAD_BATCHES))
@pytest.mark.parametrize("call", list(BATCH_CALLS))
def test_a_bad_batch_is_refused_naming_the_argument_and_index(
    embedder: Embedder, cache: EmbeddingCache, call: str, bad: str
):
    name, fn = BATCH_CALLS[call]
    make, message = BAD_BATCHES[bad]
    with pytest.raises(InvalidInputError, match=rf"^{name}{message}") as caught:
        fn(embedder, cache, make())
    # The documented mixin: one except clause catches it as ctxemb's or as a ValueError.
    assert isinstance(caught.value, CtxembError) and isinstance(caught.value, ValueError)


SINGLE_CALLS: dict[str, tuple[str, Callable[[Embedder, Any], object]]] = {
    "embed_query": ("text", lambda e, v: e.embed_query(v)),
    "embed_tokens": ("text", lambda e, v: e.embed_tokens(v)),
    "embed_tokens as query": ("text", lambda e, v: e.embed_tokens(v, role="query")),
    "word_vector": ("word", lambda e, v: e.word_vector(v, ["a cat"])),
}

BAD_SINGLES: dict[str, tuple[Any, str]] = {
    "None": (None, r" must be a string, got NoneType"),
    "bytes": (b"a cat", r" must be a string, got bytes"),
    "int": (3, r" must be a string, got int"),
    "list": (["a cat"], r" must be a string, got list"),
    "lone surrogate": ("cat \ud800", r" is not valid Unicode.*U\+D800 at character 4"),
    "surrogateescape": (b"\xff".decode("utf-8", "surrogateescape"), r" .*U\+DCFF"),
}


@pytest.mark.parametrize("bad", list(BAD_SINGLES))
@pytest.mark.parametrize("call", list(SINGLE_CALLS))
def test_a_bad_single_text_is_refused_naming_the_argument(embedder: Embedder, call: str, bad: str):
    name, fn = SINGLE_CALLS[call]
    value, message = BAD_SINGLES[bad]
    with pytest.raises(InvalidInputError, match=rf"^{name}{message}"):
        fn(embedder, value)


def test_a_refused_generator_is_left_unconsumed(embedder: Embedder):
    texts = (t for t in ["a cat", "a dog"])
    with pytest.raises(InvalidInputError, match="list"):
        embedder.embed_documents(texts)
    assert next(texts) == "a cat"  # nothing was read from it


def test_an_empty_batch_is_refused_by_the_embedder_and_allowed_below_it(
    embedder: Embedder, cache: EmbeddingCache
):
    for call in (embedder.embed_documents, embedder.embed_queries):
        with pytest.raises(InvalidInputError, match="texts is empty"):
            call([])
    with pytest.raises(InvalidInputError, match="contexts is empty"):
        embedder.word_vector("cat", [])
    # embed_float serves the stamp and the guard, which may have nothing to re-embed.
    assert embedder.embed_float([], "document").shape == (0, embedder.contract.output_dim)
    assert cache.get_many(FP, "document", []).found.shape == (0,)


def test_every_valid_code_point_class_is_embedded(embedder: Embedder):
    # Only surrogates are not Unicode scalar values; everything else UTF-8 encodes and is embedded.
    texts = [
        "NUL \x00 inside",
        "noncharacters \ufffe \uffff \U0010fffe",
        "last code point \U0010ffff",
        "private use \ue000 \U000f0000",
        "emoji 😀 as one code point",
        "combining e\u0301 and zero width \u200b joiner \u200d",
        "C1 control \x85 and BOM \ufeff",
        "",
    ]
    out = embedder.embed_documents(texts)
    assert out.shape == (len(texts), embedder.contract.output_dim)
    assert np.isfinite(out).all()
    assert embedder.embed_query(texts[4]).shape == (embedder.contract.output_dim,)
    assert embedder.embed_tokens(texts[4]).vectors.ndim == 2


def test_a_str_subclass_is_embedded_as_the_plain_string_it_holds(embedder: Embedder):
    class Shouting(str):
        # Would change the text if ctxemb prefixed or hashed the subclass itself.
        def __radd__(self, other: str) -> str:
            return (other + str.__str__(self)).upper()

        def encode(self, *args: Any, **kwargs: Any) -> bytes:
            return b"something else"

    plain = embedder.embed_documents(["a cat sat", "a dog"])
    odd = embedder.embed_documents([Shouting("a cat sat"), np.str_("a dog")])
    np.testing.assert_array_equal(odd, plain)
    np.testing.assert_array_equal(
        embedder.embed_queries([Shouting("a cat sat")]), embedder.embed_queries(["a cat sat"])
    )
    assert type(embedder.embed_tokens(Shouting("a cat")).text) is str


def test_tuples_and_other_sequences_are_batches(embedder: Embedder, cache: EmbeddingCache):
    listed = embedder.embed_documents(["a cat", "a dog"])
    np.testing.assert_array_equal(embedder.embed_documents(("a cat", "a dog")), listed)
    cache.put_many(FP, "document", ("a cat",), listed[:1])
    assert cache.get_many(FP, "document", ("a cat", "a dog")).found.tolist() == [True, False]


def test_the_cache_refuses_a_fingerprint_no_file_can_hold(cache: EmbeddingCache):
    with pytest.raises(InvalidInputError, match=r"^fingerprint is not valid Unicode"):
        cache.get_many("f\ud800", "document", ["a cat"])


def test_an_embedder_with_a_cache_refuses_before_the_cache_is_touched(
    embedder: Embedder, tmp_path: Path
):
    with EmbeddingCache(tmp_path / "c.sqlite3") as cache:
        cached = Embedder(
            embedder.contract, path=embedder.model_path, backend=embedder.backend, cache=cache
        )
        with pytest.raises(InvalidInputError, match=r"texts\[1\] is not valid Unicode"):
            cached.embed_documents(["a cat", "\udc00"])
        assert cache.stats().entries == 0
        assert cached.embed_documents(["a cat"]).shape == (1, embedder.contract.output_dim)
        assert cache.stats().entries == 1
