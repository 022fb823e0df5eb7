"""Late interaction: MaxSim, the Embedder's batched token path, the token-vector store and the
reranker, on random arrays, the bundled MiniLM and tiny BERT folders built in code.

No mocks: MaxSim is checked against a brute-force double loop and sentence-transformers' own
``maxsim``; the reranker runs the real networks (torch backend, so no ONNX export is needed).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DOCS
from safetensors.numpy import load_file
from sentence_transformers.util.similarity import maxsim as st_maxsim

from ctxemb_core import Embedder, contract_for
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.embedder import TokenEmbeddings
from ctxemb_core.errors import (
    DataFormatError,
    InvalidInputError,
    RerankerMismatchError,
    TruncationWarning,
    UnsupportedModelError,
)
from ctxemb_core.eval import build_run, document_text, load_beir, ndcg_at_k, search_topk
from ctxemb_core.rerank import (
    LateInteractionReranker,
    RerankerContract,
    ScoreThreshold,
    TokenVectorStore,
    maxsim,
    reranker_for,
)
from ctxemb_core.rerank.late import EMPTY_SCORE


def late(encoder, **fields) -> RerankerContract:
    """A late-interaction contract over ``encoder`` (until rerank_contract_for builds them)."""
    values = {
        "token_normalize": True,
        "skip": ("marker", "special"),
        "query_prefix": "",
        "document_prefix": "",
        **fields,
    }
    return RerankerContract(
        kind="late_interaction",
        model=encoder.model,
        weights=encoder.weights,
        max_tokens=encoder.max_tokens,
        encoder=encoder,
        **values,
    )


def brute_force(query: np.ndarray, docs: list[np.ndarray]) -> np.ndarray:
    """Σ_i max_j q_i · d_j with a double Python loop (float64 dot products)."""
    out = []
    for doc in docs:
        if len(doc) == 0:
            out.append(EMPTY_SCORE)
            continue
        out.append(
            sum(
                max(float(np.dot(q.astype(np.float64), d.astype(np.float64))) for d in doc)
                for q in query
            )
        )
    return np.array(out)


def padded(docs: list[np.ndarray], dim: int) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(d) for d in docs)
    array = np.zeros((len(docs), width, dim), dtype=np.float32)
    mask = np.zeros((len(docs), width), dtype=bool)
    for i, d in enumerate(docs):
        array[i, : len(d)] = d
        mask[i, : len(d)] = True
    return array, mask


def random_case(seed: int, *, dim: int = 24, query: int = 9, lengths=(5, 0, 17, 1, 40, 3)):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((query, dim)).astype(np.float32)
    docs = [rng.standard_normal((n, dim)).astype(np.float32) for n in lengths]
    return q, docs


# -- maxsim ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk_elements", [None, 1, 300, 5000])
def test_maxsim_equals_a_brute_force_double_loop(seed, chunk_elements):
    # Short candidates are scored side by side, long ones (32 tokens on) where they lie, and
    # both in pieces when the chunk is smaller than they are.
    q, docs = random_case(seed, lengths=(5, 0, 17, 1, 40, 3, 128, 300, 2))
    expected = brute_force(q, docs)
    listed = maxsim(q, docs, chunk_elements=chunk_elements)
    assert listed.dtype == np.float32 and listed.shape == (len(docs),)
    np.testing.assert_allclose(listed, expected, rtol=1e-5, atol=1e-4)
    array, mask = padded(docs, q.shape[1])
    np.testing.assert_allclose(
        maxsim(q, array, mask, chunk_elements=chunk_elements), expected, rtol=1e-5, atol=1e-4
    )


def test_padding_never_wins_a_max_over_negative_similarities():
    # Every real similarity is negative: a padding row of zeros (similarity 0) must not count.
    q = np.array([[1.0, 0.0]], dtype=np.float32)
    docs = [
        np.array([[-1.0, 0.0], [-0.5, 0.5]], dtype=np.float32),
        np.ones((4, 2), np.float32),  # makes the first one padded by two zero rows
        np.zeros((0, 2), np.float32),
    ]
    array, mask = padded(docs, 2)
    assert maxsim(q, array, mask).tolist() == [-0.5, 1.0, EMPTY_SCORE]


def test_masks_may_be_zero_one_integers_and_list_masks_select_tokens():
    q, docs = random_case(7)
    array, mask = padded(docs, q.shape[1])
    np.testing.assert_array_equal(maxsim(q, array, mask.astype(np.int8)), maxsim(q, array, mask))
    # A list of candidates with per-candidate masks: the same as leaving the tokens out.
    keep = [np.arange(len(d)) % 2 == 0 for d in docs]
    np.testing.assert_allclose(
        maxsim(q, docs, keep), maxsim(q, [d[k] for d, k in zip(docs, keep, strict=True)])
    )


def test_empty_candidates_and_empty_queries_follow_the_documented_convention():
    q, docs = random_case(3)
    # A candidate with no tokens, or every token masked, ranks below everything: EMPTY_SCORE.
    scores = maxsim(q, docs)
    assert scores[1] == EMPTY_SCORE == -1e9
    array, mask = padded(docs, q.shape[1])
    mask[2] = False
    assert maxsim(q, array, mask)[2] == EMPTY_SCORE
    # An empty query is the empty sum: 0 against every candidate that has tokens.
    none = np.zeros((0, q.shape[1]), dtype=np.float32)
    np.testing.assert_array_equal(maxsim(none, docs), np.where(scores == EMPTY_SCORE, -1e9, 0.0))
    masked_out = maxsim(q, docs, query_mask=np.zeros(len(q), dtype=bool))
    np.testing.assert_array_equal(masked_out, maxsim(none, docs))
    # No candidates at all: no scores.
    assert maxsim(q, []).shape == (0,)
    assert maxsim(q, np.zeros((0, 3, q.shape[1]), np.float32)).shape == (0,)
    # A padded batch of zero-width candidates: all empty.
    np.testing.assert_array_equal(maxsim(q, np.zeros((2, 0, q.shape[1]))), [EMPTY_SCORE] * 2)


def test_query_mask_leaves_query_tokens_out_of_the_sum():
    q, docs = random_case(5)
    keep = np.array([True, False] * 4 + [True])
    np.testing.assert_allclose(
        maxsim(q, docs, query_mask=keep), brute_force(q[keep], docs), rtol=1e-5, atol=1e-4
    )


@pytest.mark.parametrize("seed", range(3))
def test_maxsim_agrees_with_sentence_transformers(seed):
    q, docs = random_case(seed, dim=32, query=12, lengths=(8, 0, 33, 2, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its log line about the empty candidate
        reference = st_maxsim(torch.from_numpy(q), [torch.from_numpy(d) for d in docs])[0]
    np.testing.assert_allclose(maxsim(q, docs), reference.numpy(), rtol=1e-5, atol=1e-4)
    array, mask = padded(docs, q.shape[1])
    reference = st_maxsim(
        torch.from_numpy(q), torch.from_numpy(array), b_mask=torch.from_numpy(mask)
    )[0]
    np.testing.assert_allclose(maxsim(q, array, mask), reference.numpy(), rtol=1e-5, atol=1e-4)


def test_the_issue_shape_scores_as_a_per_candidate_loop_and_sentence_transformers():
    # 100 candidates x 256 tokens x 384 dims, a 32-token query: the shape the issue measures
    # (the timing itself is a benchmark's business; here only the scores are compared).
    rng = np.random.default_rng(0)
    q = rng.standard_normal((32, 384), dtype=np.float32)
    docs = [rng.standard_normal((256, 384), dtype=np.float32) for _ in range(100)]
    loop = np.array([(q @ d.T).max(axis=1).sum() for d in docs], dtype=np.float32)
    stacked = np.stack(docs)
    np.testing.assert_allclose(maxsim(q, docs), loop, rtol=1e-5)
    np.testing.assert_allclose(maxsim(q, stacked), loop, rtol=1e-5)
    reference = st_maxsim(torch.from_numpy(q), torch.from_numpy(stacked))[0].numpy()
    np.testing.assert_allclose(maxsim(q, stacked), reference, rtol=1e-5)


def test_maxsim_takes_float64_and_integer_inputs_and_returns_float32():
    q = np.array([[1, 0], [0, 2]])
    docs = [np.array([[1.0, 1.0], [3.0, -1.0]], dtype=np.float64)]
    scores = maxsim(q, docs)
    assert scores.dtype == np.float32 and scores.tolist() == [5.0]


@pytest.mark.parametrize(
    ("query", "docs", "masks", "message"),
    [
        (np.ones(4), [np.ones((2, 4))], None, "2-D"),
        (np.ones((1, 2, 4)), [np.ones((2, 4))], None, "2-D"),
        (np.ones((2, 4)), [np.ones((2, 5))], None, "width 5"),
        (np.ones((2, 4)), np.ones((3, 2, 5)), None, "width 5"),
        (np.ones((2, 4)), np.ones((2, 4)), None, "wrap a single candidate"),
        (np.ones((2, 4)), "text", None, "got str"),
        (np.ones((2, 4)), [np.ones(4)], None, r"doc_vectors\[0\] must be a 2-D"),
        (np.array([[np.nan, 1.0]]), [np.ones((2, 2))], None, "query_vectors holds NaN"),
        (np.ones((2, 2)), [np.ones((2, 2)), np.array([[1.0, np.inf]])], None, r"\[1\]"),
        (np.ones((2, 2)), [np.array([[1.0, np.nan]])], None, "NaN or infinite"),
        (np.ones((2, 2)), [np.full((1, 2), 3e38)], None, "overflow"),
        (np.zeros((0, 2)), [np.array([[np.nan, 1.0]])], None, "NaN or infinite"),
        (np.ones((2, 2)), np.ones((2, 3, 2)), np.ones((2, 2), bool), "shape"),
        (np.ones((2, 2)), np.ones((2, 3, 2)), np.full((2, 3), 0.5), "boolean"),
        (np.ones((2, 2)), [np.ones((3, 2))], [np.ones(3, bool)] * 2, "2 items for 1"),
        (np.ones((2, 2)), [np.ones((3, 2))], np.ones(3, bool), "3 items for 1"),
        (np.ones((2, 2)), [np.array([["a", "b"]])], None, "real numbers"),
        (np.ones((2, 2)), [np.ones((3, 2), complex)], None, "real numbers"),
    ],
)
def test_maxsim_refuses_bad_inputs(query, docs, masks, message):
    with pytest.raises(InvalidInputError, match=message):
        maxsim(query, docs, masks)


def test_maxsim_refuses_nan_in_padding_and_bad_options():
    array = np.ones((1, 3, 2), dtype=np.float32)
    array[0, 2] = np.nan  # padding, but not finite: refused (pad with zeros)
    with pytest.raises(InvalidInputError, match="padding"):
        maxsim(np.ones((1, 2)), array, np.array([[True, True, False]]))
    with pytest.raises(InvalidInputError, match="query_mask"):
        maxsim(np.ones((2, 2)), [np.ones((1, 2))], query_mask=np.ones(3, bool))
    with pytest.raises(InvalidInputError, match="chunk_elements"):
        maxsim(np.ones((2, 2)), [np.ones((1, 2))], chunk_elements=0)


# -- the Embedder's token path -----------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_torch(minilm_contract) -> Embedder:
    return Embedder(minilm_contract, backend="torch", batch_size=2, token_budget=64)


def test_embed_token_batch_equals_embed_tokens_in_input_order(minilm_torch):
    texts = [
        "The bank raised rates.",
        "a",
        "Willow roots hold the river bank together, and the slugs eat young lettuce at night.",
        "Green tea.",
        "",
    ]
    batch = minilm_torch.embed_token_batch(texts)  # several batches of two, longest first
    assert [t.text for t in batch] == texts
    for text, toks in zip(texts, batch, strict=True):
        one = minilm_torch.embed_tokens(text)
        assert toks.tokens == one.tokens and toks.offsets == one.offsets
        np.testing.assert_allclose(toks.vectors, one.vectors, rtol=1e-4, atol=1e-5)
        assert not toks.special.any() and not toks.marker.any() and not toks.expansion.any()
    assert batch[-1].vectors.shape == (0, 384)


def test_token_flags_name_special_and_marker_tokens(minilm_torch):
    toks = minilm_torch.embed_token_batch(["a cat, sat."], keep_special=True, marker="[D] ")[0]
    assert toks.tokens == ["[CLS]", "[", "d", "]", "a", "cat", ",", "sat", ".", "[SEP]"]
    assert toks.special.tolist() == [True] + [False] * 8 + [True]
    assert toks.marker.tolist() == [False, True, True, True] + [False] * 6
    # Offsets of the text's tokens are in the text as given; the others are empty spans.
    spans = [toks.text[s:e] for s, e in toks.offsets]
    assert spans == ["", "", "", "", "a", "cat", ",", "sat", ".", ""]
    plain = minilm_torch.embed_tokens("a cat, sat.")
    assert toks.tokens[4:9] == plain.tokens


def test_token_embeddings_stay_backwards_compatible():
    toks = TokenEmbeddings("a b", ["a", "b"], [(0, 1), (2, 3)], np.zeros((2, 3)), False)
    assert toks.special.tolist() == toks.marker.tolist() == toks.expansion.tolist() == [False] * 2
    with pytest.raises(InvalidInputError, match="one flag per token"):
        TokenEmbeddings("a", ["a"], [(0, 1)], np.zeros((1, 3)), False, special=[True, False])


def test_embed_token_batch_reports_truncation_like_embed_documents(minilm_torch):
    with pytest.warns(TruncationWarning, match="1 of 3 texts") as record:
        batch = minilm_torch.embed_token_batch(["short", "word " * 400, "also short"])
    assert record[0].filename == __file__
    assert [t.truncated for t in batch] == [False, True, False]
    assert minilm_torch.last_truncated == 1 and len(batch[1].tokens) == 256 - 2


def test_embed_token_batch_shows_progress_on_request(minilm_contract, capsys):
    emb = Embedder(minilm_contract, backend="torch", show_progress=True)
    emb.embed_token_batch(["one", "two"])
    assert "embedding" in capsys.readouterr().err


def test_query_expansion_pads_with_mask_tokens_and_cuts(tiny_bert):
    emb = Embedder(contract_for(tiny_bert, pooling="mean"), backend="torch")
    toks = emb.embed_token_batch(
        ["a cat sat", "the dog"], role="query", keep_special=True, marker="[Q] ", expand_to=12
    )
    for t in toks:
        assert len(t.tokens) == 12 and t.tokens[-1] == "[SEP]"
        assert t.tokens[-1 - int(t.expansion.sum()) : -1] == ["[MASK]"] * int(t.expansion.sum())
        assert t.offsets[-2] == (len(t.text), len(t.text))
    assert toks[0].expansion.sum() == 12 - 2 - 3 - 3
    # A longer text is cut there (and reported), not expanded.
    with pytest.warns(TruncationWarning):
        long = emb.embed_token_batch(["a cat " * 20], expand_to=8, keep_special=True)[0]
    assert len(long.tokens) == 8 and not long.expansion.any()
    for bad in (0, 10_000, True, 2.5):
        with pytest.raises(InvalidInputError, match="expand_to"):
            emb.embed_token_batch(["a"], expand_to=bad)


def test_dense_heads_apply_per_token(tiny_st_factory):
    folder = tiny_st_factory(dense_out=16)
    contract = contract_for(folder)
    assert contract.dimension == 16
    emb = Embedder(contract, backend="torch")
    raw = emb.embed_token_batch(["a cat sat on the mat"])[0]
    projected = emb.embed_token_batch(["a cat sat on the mat"], dense=True)[0]
    assert raw.vectors.shape[1] == 32 and projected.vectors.shape == (len(raw.tokens), 16)
    # The Dense module's own weights, applied with torch: linear layer, then Tanh.
    tensors = load_file(str(folder / "2_Dense" / "model.safetensors"))
    expected = torch.tanh(
        torch.nn.functional.linear(
            torch.from_numpy(raw.vectors),
            torch.from_numpy(tensors["linear.weight"]),
            torch.from_numpy(tensors["linear.bias"]),
        )
    ).numpy()
    np.testing.assert_allclose(projected.vectors, expected, rtol=1e-5, atol=1e-6)


# -- the reranker over MiniLM ------------------------------------------------------------------


@pytest.fixture(scope="module")
def contract(minilm_contract) -> RerankerContract:
    return late(minilm_contract)


@pytest.fixture(scope="module")
def reranker(contract) -> LateInteractionReranker:
    return LateInteractionReranker(contract, backend="torch")


QUERY = "how are green tea leaves processed"
TEXTS = list(DOCS.values())
IDS = list(DOCS)


def test_scores_are_maxsim_over_the_reranker_token_vectors(reranker):
    scores = reranker.score(QUERY, TEXTS)
    q = reranker.query_vectors(QUERY)
    docs = reranker.document_vectors(TEXTS)
    assert scores.dtype == np.float32 and scores.shape == (len(TEXTS),)
    np.testing.assert_array_equal(scores, maxsim(q, docs))
    np.testing.assert_allclose(scores, brute_force(q, docs), rtol=1e-5)
    # Unit-length tokens, special and marker tokens skipped: [CLS]/[SEP] are gone.
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=1e-5)
    assert len(q) == len(reranker.embedder.embed_tokens(QUERY, role="query").tokens)
    assert reranker.rerank(QUERY, TEXTS).ids == [None] * len(TEXTS)
    assert reranker.rerank(QUERY, TEXTS, ids=IDS)[0].id == "tea"


def test_precomputed_token_vectors_give_the_same_scores(reranker):
    vectors = reranker.document_vectors(TEXTS)
    np.testing.assert_array_equal(
        reranker.score(QUERY, TEXTS, token_vectors=vectors), reranker.score(QUERY, TEXTS)
    )
    ranking = reranker.rerank(QUERY, TEXTS, ids=IDS, token_vectors=vectors, top_k=2)
    assert ranking.ids == reranker.rerank(QUERY, TEXTS, ids=IDS, top_k=2).ids


def test_rerank_orders_by_score_with_top_k_and_threshold(reranker, contract):
    scores = reranker.score(QUERY, TEXTS)
    ranking = reranker.rerank(QUERY, TEXTS, ids=IDS, top_k=3)
    order = np.argsort(-scores, kind="stable")
    assert ranking.indices == order[:3].tolist() and ranking.candidates == len(TEXTS)
    np.testing.assert_array_equal(ranking.scores, scores[order[:3]])
    assert ranking.fingerprint == contract.fingerprint
    threshold = float(np.median(scores))
    kept = reranker.rerank(QUERY, TEXTS, score_threshold=ScoreThreshold(threshold, contract))
    assert sorted(kept.indices) == np.flatnonzero(scores >= threshold).tolist()
    other = contract.with_(token_normalize=False)
    with pytest.raises(RerankerMismatchError, match="token_normalize"):
        reranker.rerank(QUERY, TEXTS, score_threshold=ScoreThreshold(threshold, other))


def test_store_is_read_through_the_contract_fingerprint_only(contract):
    store = TokenVectorStore()
    reranker = LateInteractionReranker(contract, backend="torch", store=store)
    fresh = reranker.score(QUERY, TEXTS)
    np.testing.assert_array_equal(reranker.score(QUERY, TEXTS, ids=IDS), fresh)
    assert store.count(contract) == len(IDS) and (contract, "tea") in store
    # Vectors planted under this contract are what it reads: the query's own tokens score
    # one per query token.
    planted = reranker.query_vectors(QUERY)
    store.put(contract, ["bike"], [planted], texts=[DOCS["bike"]])
    scores = reranker.score(QUERY, TEXTS, ids=IDS)
    assert scores[IDS.index("bike")] == pytest.approx(len(planted), rel=1e-5)
    # A changed contract never reads them: it computes (and stores) its own.
    for changed in (
        contract.with_(token_normalize=False),
        contract.with_(skip=("special",)),
        contract.with_(document_prefix="[D] "),
    ):
        other = LateInteractionReranker(changed, backend="torch", store=store)
        assert store.count(changed) == 0 and (changed, "bike") not in store
        np.testing.assert_array_equal(other.score(QUERY, TEXTS, ids=IDS), other.score(QUERY, TEXTS))
        assert store.count(changed) == len(IDS)
    np.testing.assert_array_equal(store.get(contract, ["bike"])[0], planted)
    assert store.clear(contract) == len(IDS) and store.count(contract) == 0


def test_a_changed_text_under_an_id_is_computed_again(contract):
    store = TokenVectorStore()
    reranker = LateInteractionReranker(contract, backend="torch", store=store)
    reranker.score(QUERY, TEXTS, ids=IDS)
    edited = [*TEXTS[:-1], "Green tea leaves are steamed and rolled."]
    assert store.get(contract, IDS[-1:], texts=edited[-1:]) == [None]
    # The stored vectors were computed in another batch than the fresh ones: equal up to the
    # last bit (which a batch's shape can move); the old text's vectors are far from both.
    np.testing.assert_allclose(
        reranker.score(QUERY, edited, ids=IDS), reranker.score(QUERY, edited), rtol=1e-6
    )
    got = store.get(contract, IDS[-1:], texts=edited[-1:])[0]
    np.testing.assert_allclose(got, reranker.document_vectors(edited[-1:])[0], atol=1e-6)
    with pytest.raises(InvalidInputError, match="different texts"):
        reranker.score(QUERY, ["a", "b"], ids=["x", "x"])


def test_persisted_store_round_trip(contract, tmp_path):
    store = TokenVectorStore(tmp_path / "tokens")
    reranker = LateInteractionReranker(contract, backend="torch", store=store)
    scores = reranker.score(QUERY, TEXTS, ids=IDS)
    folder = tmp_path / "tokens" / contract.fingerprint
    assert RerankerContract.from_json((folder / "contract.json").read_text()) == contract
    assert len(list(folder.glob("*/*.tokens"))) == len(IDS)
    again = TokenVectorStore(tmp_path / "tokens")
    assert again.count(contract) == len(IDS)
    for got, made in zip(
        again.get(contract, IDS, texts=TEXTS), reranker.document_vectors(TEXTS), strict=True
    ):
        assert got is not None and got.dtype == np.float32
        np.testing.assert_array_equal(got, made)
    # Another process (a new store) reads what was written, planted vectors included.
    planted = reranker.query_vectors(QUERY)
    again.put(contract, ["moon"], [planted], texts=[DOCS["moon"]])
    third = LateInteractionReranker(
        contract, backend="torch", store=TokenVectorStore(folder.parent)
    )
    reread = third.score(QUERY, TEXTS, ids=IDS)
    assert reread[IDS.index("moon")] == pytest.approx(len(planted), rel=1e-5)
    keep = [i for i in range(len(IDS)) if IDS[i] != "moon"]
    np.testing.assert_array_equal(reread[keep], scores[keep])
    assert again.clear(contract) == len(IDS) and not folder.exists()


def _one_file(store_dir: Path, contract: RerankerContract, doc_id: str) -> Path:
    h = hashlib.sha256(doc_id.encode()).hexdigest()
    return store_dir / contract.fingerprint / h[:2] / f"{h}.tokens"


def _rewrite_header(path: Path, **changes) -> None:
    data = path.read_bytes()
    magic, header, payload = data.split(b"\n", 2)
    fields = {**json.loads(header), **changes}
    path.write_bytes(magic + b"\n" + json.dumps(fields).encode() + b"\n" + payload)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-7]), "bytes of vectors"),
        (lambda p: p.write_bytes(p.read_bytes()[:-4] + b"\x00\x00\xc0\x7f"), "sha256"),
        (lambda p: p.write_bytes(b"junk"), "not a ctxemb token-vector file"),
        (lambda p: p.write_bytes(b"ctxemb-token-vectors 1\n{"), "cut off"),
        (lambda p: _rewrite_header(p, shape=[3, 8]), "8 wide"),
        (lambda p: _rewrite_header(p, id="moon"), "holds the document"),
        (lambda p: _rewrite_header(p, fingerprint="0" * 64), "written under"),
        (lambda p: _rewrite_header(p, extra=1), "fields"),
    ],
)
def test_damaged_store_files_are_refused_never_served(contract, tmp_path, damage, message):
    store = TokenVectorStore(tmp_path)
    reranker = LateInteractionReranker(contract, backend="torch", store=store)
    reranker.score(QUERY, TEXTS, ids=IDS)
    damage(_one_file(tmp_path, contract, "tea"))
    with pytest.raises(DataFormatError, match=message):
        TokenVectorStore(tmp_path).get(contract, ["tea"])
    with pytest.raises(DataFormatError, match="refused"):
        reranker.rerank(QUERY, TEXTS, ids=IDS)
    # The other documents are still served.
    assert all(v is not None for v in store.get(contract, IDS[1:]))


def test_a_file_moved_under_another_contract_or_a_swapped_contract_is_refused(contract, tmp_path):
    other = contract.with_(token_normalize=False)
    store = TokenVectorStore(tmp_path)
    LateInteractionReranker(contract, backend="torch", store=store).score(QUERY, TEXTS, ids=IDS)
    LateInteractionReranker(other, backend="torch", store=store).score(
        QUERY, TEXTS[:1], ids=IDS[:1]
    )
    source = _one_file(tmp_path, contract, "bike")
    target = _one_file(tmp_path, other, "bike")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    with pytest.raises(DataFormatError, match="written under the reranker contract"):
        TokenVectorStore(tmp_path).get(other, ["bike"])
    shutil.copy(
        tmp_path / other.fingerprint / "contract.json",
        tmp_path / contract.fingerprint / "contract.json",
    )
    with pytest.raises(DataFormatError, match=r"not .* its folder is named for"):
        TokenVectorStore(tmp_path).get(contract, ["tea"])
    (tmp_path / contract.fingerprint / "contract.json").unlink()
    with pytest.raises(DataFormatError, match=r"no contract\.json"):
        TokenVectorStore(tmp_path).get(contract, ["tea"])


def test_store_refuses_bad_inputs(contract, minilm_contract):
    store = TokenVectorStore()
    ok = np.ones((2, 384), dtype=np.float32)
    with pytest.raises(InvalidInputError, match="width 8"):
        store.put(contract, ["a"], [np.ones((2, 8))])
    with pytest.raises(InvalidInputError, match="NaN"):
        store.put(contract, ["a"], [np.full((2, 384), np.nan)])
    with pytest.raises(InvalidInputError, match="2 items for 1"):
        store.put(contract, ["a"], [ok, ok])
    with pytest.raises(InvalidInputError, match="texts has 2 items for 1"):
        store.put(contract, ["a"], [ok], texts=["x", "y"])
    with pytest.raises(InvalidInputError, match="RerankerContract"):
        store.get(minilm_contract, ["a"])
    assert store.count(contract) == 0
    # Stored arrays are the store's own: changing the caller's copy changes nothing.
    mine = ok.copy()
    store.put(contract, ["a"], [mine])
    mine[:] = 7
    got = store.get(contract, ["a"])[0]
    assert got is not None and (got == 1).all() and not got.flags.writeable


def test_reranker_refuses_bad_inputs(reranker, contract, minilm_contract):
    cross = RerankerContract(
        kind="cross_encoder",
        model=minilm_contract.model,
        weights=minilm_contract.weights,
        max_tokens=256,
        activation="sigmoid",
        pair_format="tokenizer",
    )
    with pytest.raises(InvalidInputError, match="late_interaction contract"):
        LateInteractionReranker(cross)
    with pytest.raises(InvalidInputError, match="TokenVectorStore"):
        LateInteractionReranker(contract, backend="torch", store={})  # type: ignore[arg-type]
    vectors = reranker.document_vectors(TEXTS[:2])
    for bad, message in (
        (vectors[:1], "1 items for 2"),
        ([vectors[0], vectors[1][:, :10]], "width 10"),
        ([vectors[0], np.full((3, 384), np.nan, np.float32)], "NaN"),
        ([vectors[0], vectors[1] * 2], "unit length"),
        ("not vectors", "list"),
    ):
        with pytest.raises(InvalidInputError, match=message):
            reranker.score(QUERY, TEXTS[:2], token_vectors=bad)
    with pytest.raises(InvalidInputError, match="unknown inputs"):
        reranker.score(QUERY, TEXTS[:2], vectors=vectors)
    with pytest.raises(InvalidInputError, match="ids has 1 items for 2"):
        reranker.rerank(QUERY, TEXTS[:2], ids=["a"])
    with pytest.raises(InvalidInputError, match="must be a string"):
        reranker.query_vectors(None)  # type: ignore[arg-type]
    assert reranker.score(QUERY, []).shape == (0,)
    assert reranker.document_vectors([]) == []


def test_reranker_for_builds_it_from_the_contract_or_its_config(reranker, contract):
    built = reranker_for(contract.to_dict(), backend="torch")
    assert isinstance(built, LateInteractionReranker)
    np.testing.assert_array_equal(built.score(QUERY, TEXTS), reranker.score(QUERY, TEXTS))
    assert built.config()["contract"] == contract.to_dict()


# -- tiny encoders: markers, skips, expansion, dense heads ---------------------------------------


def test_markers_skips_and_query_expansion_on_a_tiny_bert(tiny_bert):
    encoder = contract_for(tiny_bert, pooling="mean")
    base = late(encoder, query_prefix="[Q] ", document_prefix="[D] ")
    plain = LateInteractionReranker(base, backend="torch")
    doc = "the cat sat, then ran."
    text_tokens = plain.embedder.embed_tokens(doc)  # the ColBERT markers and specials dropped
    assert plain.document_vectors([doc])[0].shape == (len(text_tokens.tokens), 32)
    keep_all = LateInteractionReranker(base.with_(skip=()), backend="torch")
    assert len(keep_all.document_vectors([doc])[0]) == len(text_tokens.tokens) + 2 + 3
    no_punct = LateInteractionReranker(
        base.with_(skip=("marker", "punctuation", "special")), backend="torch"
    )
    assert len(no_punct.document_vectors([doc])[0]) == len(text_tokens.tokens) - 2
    # Punctuation is skipped on the document side only, as ColBERT does.
    assert len(no_punct.query_vectors(doc)) == len(plain.query_vectors(doc))
    # Query expansion: 16 tokens read; the masks are kept though specials and markers are not.
    expanded = LateInteractionReranker(base.with_(query_length=16), backend="torch")
    q = expanded.query_vectors("a cat")
    assert q.shape == (16 - 2 - 3, 32)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=1e-5)
    with pytest.warns(TruncationWarning):
        assert len(expanded.query_vectors("the cat sat on " * 10)) == 16 - 2 - 3
    scores = expanded.score("a cat", [doc, "the bank"])
    np.testing.assert_array_equal(scores, maxsim(q, expanded.document_vectors([doc, "the bank"])))
    # Without normalisation the token vectors are the encoder's own (read after the marker).
    raw = LateInteractionReranker(base.with_(token_normalize=False), backend="torch")
    read = raw.embedder.embed_token_batch([doc], marker="[D] ")[0]
    assert read.tokens[3:] == text_tokens.tokens and read.marker.sum() == 3
    np.testing.assert_array_equal(raw.document_vectors([doc])[0], read.vectors[~read.marker])


def test_query_expansion_needs_a_mask_token(tiny_decoder):
    encoder = contract_for(tiny_decoder, pooling="last_token")
    reranker = LateInteractionReranker(late(encoder, query_length=8), backend="torch")
    with pytest.raises(UnsupportedModelError, match="mask token"):
        reranker.query_vectors("a cat")
    assert len(reranker.document_vectors(["a cat"])[0]) == 2  # documents are never expanded


def test_a_dense_head_projects_every_token(tiny_st_factory):
    folder = tiny_st_factory(dense_out=16)
    contract = late(contract_for(folder), token_normalize=False)
    reranker = LateInteractionReranker(contract, path=folder, backend="torch")
    assert reranker.dimension == 16
    doc = "a cat sat on the mat"
    vectors = reranker.document_vectors([doc])[0]
    projected = reranker.embedder.embed_token_batch([doc], dense=True)[0].vectors
    assert vectors.shape == (len(projected), 16)
    # The same network and head; the two paths batch differently, which moves the last bit on
    # some CPUs (1.2e-7 seen on an AMD EPYC).
    np.testing.assert_allclose(vectors, projected, rtol=1e-5, atol=1e-6)
    store = TokenVectorStore()
    with_store = LateInteractionReranker(contract, path=folder, backend="torch", store=store)
    with_store.score("a cat", [doc], ids=["d"])
    stored = store.get(contract, ["d"])[0]
    assert stored is not None and stored.shape[1] == 16
    with pytest.raises(InvalidInputError, match="width 32"):
        reranker.score("a cat", [doc], token_vectors=[np.ones((3, 32), np.float32)])


# -- SciFact -------------------------------------------------------------------------------------

# Every document judged for the queries plus the corpus head: each shortlisted document's token
# vectors are run through torch, so the sizes are what the checks need.
N_QUERIES = 10
N_DOCUMENTS = 80
SHORTLIST = 20


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")
def test_maxsim_reranks_a_scifact_bi_encoder_shortlist(data_dir, minilm_contract, contract):
    """MiniLM is not trained for late interaction: the nDCG is a measurement, not a target.

    The first 10 test queries, over every document judged for them plus the head of the
    corpus (80 in all); a bi-encoder top-20, reranked by MaxSim over MiniLM token vectors.
    The bi-encoder is the default backend's, through the run's embedding cache: in the
    evaluation-set worker (tests/conftest.py) its vectors are those ``ctxemb eval`` embedded
    for SciFact, read back (the cache keeps each backend's vectors apart).
    """
    data = load_beir(data_dir / "scifact")
    query_ids = list(data.queries)[:N_QUERIES]
    judged = {d for q in query_ids for d in data.qrels[q]}
    doc_ids = list(dict.fromkeys([*(d for d in data.corpus if d in judged), *data.corpus]))
    doc_ids = doc_ids[:N_DOCUMENTS]
    texts = [document_text(data.corpus[d]) for d in doc_ids]
    with EmbeddingCache() as cache:
        embedder = Embedder(minilm_contract, cache=cache)
        indices, scores = search_topk(
            embedder.embed_queries([data.queries[q] for q in query_ids]),
            embedder.embed_documents(texts),
            SHORTLIST,
        )
    before = build_run(query_ids, doc_ids, indices, scores)
    store = TokenVectorStore()
    reranker = LateInteractionReranker(contract, backend="torch", store=store)
    after: dict[str, dict[str, float]] = {}
    for row, query_id in enumerate(query_ids):
        shortlist = [doc_ids[i] for i in indices[row]]
        ranking = reranker.rerank(
            data.queries[query_id], [texts[i] for i in indices[row]], ids=shortlist
        )
        assert sorted(r.id for r in ranking) == sorted(shortlist)  # a permutation of it
        assert ranking.fingerprint == contract.fingerprint
        after[query_id] = {r.id: r.score for r in ranking if r.id is not None}
    assert store.count(contract) == len({doc_ids[i] for i in indices.ravel()})
    qrels = {q: data.qrels[q] for q in query_ids}
    ndcg_before, ndcg_after = ndcg_at_k(before, qrels, 10), ndcg_at_k(after, qrels, 10)
    print(
        f"SciFact nDCG@10 over {N_QUERIES} queries: bi-encoder {ndcg_before:.4f}, "
        f"MaxSim rerank {ndcg_after:.4f}"
    )
    assert 0.0 <= ndcg_before <= 1.0 and 0.0 <= ndcg_after <= 1.0


def test_large_products_run_on_onnxruntime_and_agree_with_float64():
    # Products above the size threshold use onnxruntime's GEMM; the scores are the formula's.
    from ctxemb_core.rerank import late

    rng = np.random.default_rng(7)
    q = rng.standard_normal((32, 384)).astype(np.float32)
    a = rng.standard_normal((4096, 384)).astype(np.float32)
    assert a.shape[0] * a.shape[1] * q.shape[0] >= late._MLAS_MIN_FLOPS
    assert late._mlas_session() is not None  # onnxruntime is a core dependency
    got = late._matmul(a, np.ascontiguousarray(q.T))
    exact = a.astype(np.float64) @ q.T.astype(np.float64)
    assert got.dtype == np.float32 and np.abs(got - exact).max() < 1e-3
    docs = rng.standard_normal((40, 256, 384)).astype(np.float32)
    scores = late.maxsim(q, docs)
    brute = [(q.astype(np.float64) @ d.astype(np.float64).T).max(axis=1).sum() for d in docs]
    np.testing.assert_allclose(scores, brute, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(late.maxsim(q, list(docs)), brute, rtol=1e-5, atol=1e-3)
