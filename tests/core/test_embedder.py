"""The embedder: roles, pooling over any encoder, truncation, token vectors, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from conftest import MINILM
from sentence_transformers import SentenceTransformer
from tiny_models import POOLING_MODES

from ctxemb_core import Embedder, Pooling, contract_for
from ctxemb_core.embedder import _ENCODERS
from ctxemb_core.errors import InvalidInputError, TruncationWarning

SENTENCES = [
    "the bank raised interest rates again this year.",
    "we sat on the river bank and watched the water.",
    "a cat is a small animal.",
    "what is the best way to learn music?",
    "short",
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def test_hello_has_the_documented_shape_and_unit_norm(minilm):
    v = minilm.embed_query("hello")
    assert v.shape == (384,) and v.dtype == np.float32
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5


def test_bundled_model_matches_sentence_transformers(minilm, st_minilm):
    ours = minilm.embed_documents(SENTENCES)
    theirs = st_minilm.encode(SENTENCES, normalize_embeddings=True)
    assert cosines(ours, theirs).min() >= 0.99999
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_output_order_equals_input_order_whatever_the_batching(minilm_contract):
    texts = [("word " * n).strip() for n in (3, 40, 1, 17, 2, 60, 5)]
    one = Embedder(minilm_contract, batch_size=1).embed_documents(texts)
    many = Embedder(minilm_contract, batch_size=3).embed_documents(texts)
    assert cosines(one, many).min() > 0.99999
    single = np.stack([Embedder(minilm_contract).embed_documents([t])[0] for t in texts])
    assert cosines(single, many).min() > 0.99999


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_every_pooling_equals_sentence_transformers_on_a_tiny_model(tiny_st_factory, mode):
    folder = tiny_st_factory(pooling=mode, normalize=mode != "max")
    ours = Embedder(contract_for(folder)).embed_documents(SENTENCES)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["tanh", "identity", "gelu"])
def test_dense_heads_are_applied_like_sentence_transformers(tiny_st_factory, activation):
    folder = tiny_st_factory(dense_out=24, dense_activation=activation)
    c = contract_for(folder)
    assert c.dimension == 24
    ours = Embedder(c).embed_documents(SENTENCES)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_any_pooling_over_any_encoder_gives_different_vectors(tiny_bert):
    vectors = {
        p: Embedder(contract_for(tiny_bert, pooling=p)).embed_documents(SENTENCES) for p in Pooling
    }
    for p in Pooling:
        for q in Pooling:
            if p is not q and {p, q} != {Pooling.MEAN, Pooling.MEAN_SQRT_LEN}:
                assert cosines(vectors[p], vectors[q]).min() < 0.999, (p, q)
    # mean and mean_sqrt_len differ only in scale, so they differ before normalisation.
    raw = Embedder(contract_for(tiny_bert, pooling="mean_sqrt_len", normalize=False))
    mean = Embedder(contract_for(tiny_bert, pooling="mean", normalize=False))
    assert not np.allclose(raw.embed_documents(SENTENCES), mean.embed_documents(SENTENCES))


def test_cls_and_mean_follow_their_definitions_on_the_token_vectors(tiny_bert):
    text = SENTENCES[0]
    enc = _ENCODERS_for(contract_for(tiny_bert, pooling="mean", normalize=False))
    batch = enc.encode([text], 128)
    hidden = batch.hidden[0]
    mean = Embedder(contract_for(tiny_bert, pooling="mean", normalize=False)).embed_documents(
        [text]
    )
    cls = Embedder(contract_for(tiny_bert, pooling="cls", normalize=False)).embed_documents([text])
    np.testing.assert_allclose(mean[0], hidden.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cls[0], hidden[0], rtol=1e-5, atol=1e-6)


def _ENCODERS_for(contract):
    Embedder(contract, backend="torch")
    return _ENCODERS[(contract.weights, "torch", "cpu")][0]


def test_decoder_last_token_pooling_lands_on_eos(tiny_decoder):
    c = contract_for(tiny_decoder, pooling="last_token", normalize=False)
    emb = Embedder(c, backend="torch")
    texts = ["the cat sat", "a much longer sentence about the river bank and money"]
    vectors = emb.embed_documents(texts)  # one batch: the short text is right-padded
    for text, vec in zip(texts, vectors, strict=True):
        toks = emb.embed_tokens(text)
        batch = _ENCODERS[(c.weights, "torch", "cpu")][0].encode(
            [text], c.max_tokens, with_tokens=True
        )
        assert batch.tokens[0][-1] == "</s>"
        np.testing.assert_allclose(vec, batch.hidden[0][-1], rtol=1e-4, atol=1e-5)
        assert "</s>" not in toks.tokens


def test_dpr_pair_uses_the_query_encoder_for_queries_only(tiny_dpr):
    query_dir, doc_dir = tiny_dpr
    pair = contract_for(doc_dir, pooling="cls", query_encoder=query_dir, name="acme/dpr-doc")
    assert pair.query_weights is not None and pair.query_weights != pair.weights
    emb = Embedder(pair)
    q_alone = Embedder(contract_for(query_dir, pooling="cls")).embed_documents(["a cat"])[0]
    d_alone = Embedder(contract_for(doc_dir, pooling="cls")).embed_documents(["a cat"])[0]
    np.testing.assert_allclose(emb.embed_query("a cat"), q_alone, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(emb.embed_documents(["a cat"])[0], d_alone, rtol=1e-5, atol=1e-6)
    assert float(q_alone @ d_alone) < 0.999


def test_e5_prefixes_are_applied_by_role_and_never_crossed(tiny_bert):
    e5 = Embedder(contract_for(tiny_bert, pooling="mean", family="e5"))
    bare = Embedder(contract_for(tiny_bert, pooling="mean"))
    text = "what is a cat"
    np.testing.assert_allclose(
        e5.embed_query(text), bare.embed_documents(["query: " + text])[0], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        e5.embed_documents([text])[0],
        bare.embed_documents(["passage: " + text])[0],
        rtol=1e-5,
        atol=1e-6,
    )
    np.testing.assert_allclose(e5.embed_queries([text])[0], e5.embed_query(text), rtol=1e-6)
    assert float(e5.embed_query(text) @ e5.embed_documents([text])[0]) < 0.9999


def test_matryoshka_truncates_before_normalising(minilm):
    short = Embedder(contract_for(MINILM, truncate_dim=64))
    raw = Embedder(contract_for(MINILM, normalize=False)).embed_documents(SENTENCES)
    expected = raw[:, :64] / np.linalg.norm(raw[:, :64], axis=1, keepdims=True)
    got = short.embed_documents(SENTENCES)
    assert got.shape == (len(SENTENCES), 64)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_precisions_are_their_own_output_forms(minilm):
    f32 = minilm.embed_documents(SENTENCES)
    f16 = Embedder(contract_for(MINILM, precision="float16")).embed_documents(SENTENCES)
    i8 = Embedder(contract_for(MINILM, precision="int8")).embed_documents(SENTENCES)
    b = Embedder(contract_for(MINILM, precision="binary")).embed_documents(SENTENCES)
    assert f16.dtype == np.float16 and i8.dtype == np.int8 and b.dtype == np.uint8
    assert b.shape == (len(SENTENCES), 48)
    np.testing.assert_array_equal(np.unpackbits(b, axis=1).astype(bool), f32 > 0)
    np.testing.assert_allclose(i8 / 127.0, f32, atol=0.5 / 127 + 1e-6)


def test_loaded_networks_are_shared_by_digest(minilm_contract):
    a = Embedder(minilm_contract)
    b = Embedder(minilm_contract.with_(pooling="cls"))
    assert a._doc[0] is b._doc[0]


def test_truncation_is_reported_not_silent(minilm):
    long_text = "word " * 1000
    with pytest.warns(
        TruncationWarning, match="1 of 2 texts were longer than max_tokens=256"
    ) as rec:
        minilm.embed_documents([long_text, "short"])
    assert rec[0].message.count == 1 and minilm.last_truncated == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        minilm.embed_documents(["short", "also short"])
    assert minilm.last_truncated == 0
    tail_changed = minilm.embed_documents([long_text + " completely different ending"])
    np.testing.assert_allclose(tail_changed[0], minilm.embed_documents([long_text])[0], atol=1e-6)


@pytest.mark.parametrize(
    ("call", "arg", "message"),
    [
        ("embed_documents", None, "list of strings"),
        ("embed_documents", "one string", "got one string"),
        ("embed_documents", [], "empty"),
        ("embed_documents", ["ok", None], r"texts\[1\] is NoneType"),
        ("embed_documents", ["ok", 3], r"texts\[1\] is int"),
        ("embed_queries", [b"bytes"], "not a string"),
        ("embed_query", None, "must be a string"),
        ("embed_query", ["a list"], "must be a string"),
        ("embed_tokens", 5, "must be a string"),
    ],
)
def test_bad_input_gets_a_typed_readable_error(minilm, call, arg, message):
    with pytest.raises(InvalidInputError, match=message):
        getattr(minilm, call)(arg)


def test_constructor_rejects_bad_arguments(minilm_contract):
    with pytest.raises(InvalidInputError, match="EmbeddingContract"):
        Embedder("sentence-transformers/all-MiniLM-L6-v2")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="batch_size"):
        Embedder(minilm_contract, batch_size=0)
    with pytest.raises(InvalidInputError, match="valid backends"):
        Embedder(minilm_contract.with_(pooling="max"), backend="tensorflow")


def test_embed_tokens_gives_tokens_offsets_and_contextual_vectors(minilm):
    text = "The bank raised rates."
    toks = minilm.embed_tokens(text)
    assert toks.tokens == ["the", "bank", "raised", "rates", "."]
    assert [text[s:e].lower() for s, e in toks.offsets] == toks.tokens
    assert toks.vectors.shape == (5, 384) and not toks.truncated


def test_embed_tokens_drops_prefix_tokens_and_keeps_offsets_in_the_text(tiny_bert):
    e5 = Embedder(contract_for(tiny_bert, pooling="mean", family="e5"))
    toks = e5.embed_tokens("a cat sat", role="query")
    assert [("a cat sat")[s:e] for s, e in toks.offsets] == toks.tokens == ["a", "cat", "sat"]


def test_polysemy_bank_is_closer_within_the_money_sense(minilm):
    money_a = "I deposited my salary at the bank this morning."
    money_b = "The bank approved our mortgage and lowered the interest rate."
    river = "We had a picnic on the grassy bank of the river."

    def bank(sentence: str) -> np.ndarray:
        toks = minilm.embed_tokens(sentence)
        return toks.vectors[toks.tokens.index("bank")]

    def cos(u: np.ndarray, v: np.ndarray) -> float:
        return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))

    same_sense = cos(bank(money_a), bank(money_b))
    assert same_sense > cos(bank(money_a), bank(river))
    assert same_sense > cos(bank(money_b), bank(river))


def test_word_vector_aggregates_occurrences_and_records_how(minilm):
    contexts = ["The bank is closed.", "A river bank, a bank holiday.", "no match here"]
    wv = minilm.word_vector("bank", contexts)
    assert wv.aggregate == "mean" and wv.occurrences == 3 and wv.vector.shape == (384,)
    first = minilm.embed_tokens(contexts[0])
    occurrences = [first.vectors[first.tokens.index("bank")]]
    second = minilm.embed_tokens(contexts[1])
    occurrences += [second.vectors[i] for i, t in enumerate(second.tokens) if t == "bank"]
    np.testing.assert_allclose(wv.vector, np.mean(occurrences, axis=0), rtol=1e-5, atol=1e-6)
    assert minilm.word_vector("bank", contexts, aggregate="max").aggregate == "max"
    with pytest.raises(InvalidInputError, match="occurs in none"):
        minilm.word_vector("zebra", contexts)
    with pytest.raises(InvalidInputError, match="aggregate"):
        minilm.word_vector("bank", contexts, aggregate="sum")


def test_multi_piece_words_average_their_pieces(minilm):
    toks = minilm.embed_tokens("Mitochondria matter.")
    pieces = toks.span(0, len("Mitochondria"))
    assert len(pieces) > 1
    wv = minilm.word_vector("mitochondria", ["Mitochondria matter."])
    np.testing.assert_allclose(wv.vector, toks.vectors[pieces].mean(axis=0), rtol=1e-5, atol=1e-6)


def test_torch_is_left_as_found(minilm):
    threads = torch.get_num_threads()
    minilm.embed_documents(SENTENCES)
    assert torch.get_num_threads() == threads and torch.is_grad_enabled()


def test_embedding_cache_serves_repeats_bit_identically(minilm_contract, tmp_path):
    from ctxemb_core.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path / "cache.sqlite3")
    emb = Embedder(minilm_contract, cache=cache)
    first = emb.embed_documents(SENTENCES)
    assert cache.stats().misses == len(SENTENCES)
    again = emb.embed_documents(list(reversed(SENTENCES)))
    assert cache.stats().hits == len(SENTENCES)
    np.testing.assert_array_equal(again, first[::-1])
    # Another role or another contract never reads these entries.
    emb.embed_queries(SENTENCES[:1])
    Embedder(minilm_contract.with_(truncate_dim=64), cache=cache).embed_documents(SENTENCES[:1])
    assert cache.stats().hits == len(SENTENCES)
    # The canary path is never served from the cache: it must prove the encoder itself.
    before = cache.stats()
    emb.embed_float(SENTENCES, "document")
    assert cache.stats() == before


def test_token_budget_batches_keep_order_and_the_budget(minilm_contract):
    texts = [("word " * n).strip() for n in (3, 200, 1, 17, 2, 60, 5, 120, 9, 40)]
    emb = Embedder(minilm_contract, batch_size=4, token_budget=256)
    encoder = emb._doc.encoder
    lengths = encoder.tokenizer.lengths(texts, minilm_contract.max_tokens)
    plan = emb._plan(encoder, texts)
    assert sorted(i for b in plan for i in b) == list(range(len(texts)))
    for batch in plan:
        padded = len(batch) * max(lengths[i] for i in batch)
        assert len(batch) == 1 or padded <= 256
        assert len(batch) <= 4
    one_by_one = np.stack([emb.embed_documents([t])[0] for t in texts])
    assert cosines(emb.embed_documents(texts), one_by_one).min() > 0.99999
    with pytest.raises(InvalidInputError, match="token_budget"):
        Embedder(minilm_contract, token_budget=0)
