"""Tests of ctxemb_core.eval: trec_eval-exact metrics, exact top-k search, STS and BEIR readers."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxemb_core.errors import CtxembError, DataFormatError, InvalidInputError
from ctxemb_core.eval import (
    BeirDataset,
    build_run,
    cosine_scores,
    document_text,
    evaluate,
    load_beir,
    load_jsonl_corpus,
    load_sts,
    map_at_k,
    mrr_at_k,
    ndcg_at_k,
    pearson,
    precision_at_k,
    recall_at_k,
    search_topk,
    spearman,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


# --------------------------------------------------------------------------------------------
# nDCG
# --------------------------------------------------------------------------------------------


def test_ndcg_graded_relevance_uses_linear_gain_and_log2_discount() -> None:
    qrels = {"q": {"a": 2, "b": 1, "c": 0}}
    run = {"q": {"x": 0.9, "a": 0.8, "b": 0.7}}
    # Ranks: x (unjudged), a (2), b (1).
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(run, qrels, 3) == pytest.approx(dcg / idcg)
    # Cut at 2: only a counts; the ideal list is cut at 2 as well.
    assert ndcg_at_k(run, qrels, 2) == pytest.approx((2 / math.log2(3)) / idcg)
    assert ndcg_at_k(run, qrels, 1) == 0.0


def test_ndcg_gain_is_linear_not_exponential() -> None:
    # With 2**rel - 1 gains this would be (1/log2(2) + 7/log2(3)) / (7 + 1/log2(3)).
    qrels = {"q": {"hi": 3, "lo": 1}}
    run = {"q": {"lo": 2.0, "hi": 1.0}}
    expected = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert ndcg_at_k(run, qrels, 2) == pytest.approx(expected)


def test_ndcg_ideal_uses_all_judged_docs_even_unretrieved() -> None:
    qrels = {"q": {"a": 1, "b": 1, "c": 1}}
    run = {"q": {"a": 1.0}}
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(run, qrels, 10) == pytest.approx(1 / idcg)


def test_ndcg_perfect_and_mean_over_qrels_queries() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}, "q3": {"c": 1}}
    run = {
        "q1": {"a": 0.5, "z": 0.1},  # perfect
        "q2": {"b": 0.9},  # perfect
        # q3 missing from the run: scores 0, still in the mean
        "q_not_judged": {"a": 1.0},  # ignored
    }
    assert ndcg_at_k(run, qrels, 10) == pytest.approx(2 / 3)


def test_query_with_only_nonrelevant_judgements_scores_zero_and_counts() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}}
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}}
    assert ndcg_at_k(run, qrels, 10) == pytest.approx(0.5)
    assert recall_at_k(run, qrels, 10) == pytest.approx(0.5)
    assert mrr_at_k(run, qrels, 10) == pytest.approx(0.5)


def test_query_with_empty_judgements_is_not_counted() -> None:
    # trec_eval only sees a query through its judgement lines.
    qrels = {"q1": {"a": 1}, "q2": {}}
    assert ndcg_at_k({"q1": {"a": 1.0}}, qrels, 10) == 1.0


def test_negative_grades_are_not_relevant() -> None:
    qrels = {"q": {"a": -1, "b": 1}}
    run = {"q": {"a": 2.0, "b": 1.0}}
    assert ndcg_at_k(run, qrels, 2) == pytest.approx(1 / math.log2(3))
    assert mrr_at_k(run, qrels, 2) == 0.5


# --------------------------------------------------------------------------------------------
# Ties: score descending, then doc id descending (trec_eval / pytrec_eval)
# --------------------------------------------------------------------------------------------


def test_ties_are_broken_by_doc_id_descending_not_insertion_order() -> None:
    qrels = {"q": {"a": 1}}
    for run in ({"q": {"a": 1.0, "b": 1.0}}, {"q": {"b": 1.0, "a": 1.0}}):
        # "b" > "a", so b ranks first and the relevant a is at rank 2.
        assert mrr_at_k(run, qrels, 1) == 0.0
        assert mrr_at_k(run, qrels, 2) == 0.5
        assert ndcg_at_k(run, qrels, 1) == 0.0
        assert recall_at_k(run, qrels, 1) == 0.0
        assert precision_at_k(run, qrels, 1) == 0.0


def test_tie_order_is_string_order_of_ids() -> None:
    # As strings "9" > "10", so "9" ranks first (trec_eval compares docnos with strcmp).
    qrels = {"q": {"10": 1}}
    run = {"q": {"9": 0.5, "10": 0.5}}
    assert mrr_at_k(run, qrels, 10) == 0.5


def test_numpy_scores_rank_like_python_floats() -> None:
    qrels = {"q": {"a": 1}}
    run: dict[str, dict[str, Any]] = {
        "q": {"a": np.float32(0.25), "b": 0.25}
    }  # equal values, different types
    assert mrr_at_k(run, qrels, 10) == 0.5


# --------------------------------------------------------------------------------------------
# Recall, precision, MRR, evaluate
# --------------------------------------------------------------------------------------------


def test_recall_at_k() -> None:
    qrels = {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"d": 1}}
    run = {"q1": {"a": 0.9, "x": 0.8, "b": 0.7}, "q2": {"x": 0.9, "d": 0.1}}
    # q1: 2 relevant (c has grade 0); q2: 1 relevant.
    assert recall_at_k(run, qrels, 1) == pytest.approx((1 / 2 + 0) / 2)
    assert recall_at_k(run, qrels, 2) == pytest.approx((1 / 2 + 1) / 2)
    assert recall_at_k(run, qrels, 3) == pytest.approx((1 + 1) / 2)


def test_precision_divides_by_k_even_when_fewer_retrieved() -> None:
    qrels = {"q": {"a": 1, "b": 1}}
    run = {"q": {"a": 0.9, "x": 0.5}}
    assert precision_at_k(run, qrels, 1) == 1.0
    assert precision_at_k(run, qrels, 2) == 0.5
    assert precision_at_k(run, qrels, 10) == pytest.approx(0.1)


def test_mrr_at_k() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    run = {
        "q1": {"a": 0.9, "x": 0.1},  # rank 1
        "q2": {"x": 0.9, "y": 0.8, "b": 0.7},  # rank 3
        "q3": {"x": 0.9},  # not found
    }
    assert mrr_at_k(run, qrels, 10) == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert mrr_at_k(run, qrels, 2) == pytest.approx((1 + 0 + 0) / 3)


def test_evaluate_keys_and_agreement_with_single_metrics() -> None:
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(30)]
    qrels = {
        f"q{i}": {str(d): int(rng.integers(0, 3)) for d in rng.choice(docs, 4)} for i in range(6)
    }
    run = {q: {d: float(rng.integers(0, 4)) for d in docs} for q in qrels}
    result = evaluate(run, qrels, ks=(10, 1, 5))
    assert list(result) == [
        f"{m}@{k}" for m in ("ndcg", "recall", "precision", "mrr", "map") for k in (1, 5, 10)
    ]
    for k in (1, 5, 10):
        assert result[f"ndcg@{k}"] == pytest.approx(ndcg_at_k(run, qrels, k))
        assert result[f"recall@{k}"] == pytest.approx(recall_at_k(run, qrels, k))
        assert result[f"precision@{k}"] == pytest.approx(precision_at_k(run, qrels, k))
        assert result[f"mrr@{k}"] == pytest.approx(mrr_at_k(run, qrels, k))
        assert result[f"map@{k}"] == pytest.approx(map_at_k(run, qrels, k))
    assert set(evaluate(run, qrels)) >= {
        "ndcg@10",
        "recall@100",
        "mrr@10",
        "precision@1",
        "map@100",
    }


def test_map_divides_by_every_relevant_judgement_and_cuts_at_k() -> None:
    # Relevant: a (2), b (1), c (1); d is judged 0. c is never retrieved.
    qrels = {"q": {"a": 2, "b": 1, "c": 1, "d": 0}}
    run = {"q": {"a": 0.9, "d": 0.8, "x": 0.7, "b": 0.6}}
    # Hits at ranks 1 and 4: (1/1 + 2/4) / 3 relevant, grades do not weigh.
    assert map_at_k(run, qrels, 10) == pytest.approx((1 + 2 / 4) / 3)
    # Cut at 3: only the hit at rank 1 counts, still divided by all 3 relevant.
    assert map_at_k(run, qrels, 3) == pytest.approx(1 / 3)
    # Ties rank by id descending, as trec_eval: "b" before "a" at equal scores.
    tied = {"q": {"a": 0.5, "b": 0.5}}
    assert map_at_k(tied, {"q": {"a": 1}}, 10) == pytest.approx(1 / 2)
    # A query without relevant judgements scores 0 and counts; a missing query scores 0.
    assert map_at_k(run, {"q": {"a": 1}, "none": {"a": 0}, "gone": {"z": 1}}, 10) == (
        pytest.approx(1 / 3)
    )


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "10"])
def test_invalid_k_is_rejected(k: object) -> None:
    with pytest.raises(InvalidInputError):
        ndcg_at_k({"q": {"a": 1.0}}, {"q": {"a": 1}}, k)  # type: ignore[arg-type]


def test_empty_qrels_and_empty_ks_are_rejected() -> None:
    with pytest.raises(InvalidInputError, match="qrels"):
        recall_at_k({"q": {"a": 1.0}}, {}, 10)
    with pytest.raises(InvalidInputError, match="ks"):
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, ks=())
    # InvalidInputError is also a ValueError and a CtxembError.
    with pytest.raises(ValueError):
        evaluate({}, {}, ks=(1,))


# --------------------------------------------------------------------------------------------
# search_topk / build_run
# --------------------------------------------------------------------------------------------


def _unit(rows: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize(("query_block", "doc_block"), [(256, 65536), (3, 7), (1, 1)])
def test_search_topk_matches_brute_force(query_block: int, doc_block: int) -> None:
    q, d = _unit(11, 16, 1), _unit(50, 16, 2)
    idx, scores = search_topk(q, d, 5, query_block=query_block, doc_block=doc_block)
    full = q @ d.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, :5]
    assert idx.shape == scores.shape == (11, 5)
    assert idx.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), rtol=1e-6)


def test_search_topk_ties_prefer_lower_index_whatever_the_blocks() -> None:
    # Small integers make every dot product exact in float32 whatever the BLAS summation order
    # (real embeddings can differ by an ulp between tile shapes), so the ties here are exact.
    base = np.array([[1, 0, 2, 0], [0, 1, 0, 0], [1, 1, 1, 1], [2, 0, 1, 0]], dtype=np.float32)
    # Documents 1, 3, 5 and 6 are the same vector: tied top scores across block boundaries.
    d = np.stack([base[1], base[0], base[2], base[0], base[3], base[0], base[0]])
    q = base[:1]
    for block in (1, 2, 3, 7):
        idx, scores = search_topk(q, d, 3, query_block=1, doc_block=block)
        np.testing.assert_array_equal(idx, [[1, 3, 5]])
        np.testing.assert_array_equal(scores, [[5.0, 5.0, 5.0]])
    idx, _ = search_topk(q, d, 5, doc_block=2)
    np.testing.assert_array_equal(idx, [[1, 3, 5, 6, 4]])


def test_search_topk_clips_k_and_validates() -> None:
    q, d = _unit(2, 4, 4), _unit(3, 4, 5)
    idx, _ = search_topk(q, d, 10)
    assert idx.shape == (2, 3)
    with pytest.raises(InvalidInputError, match="dimension"):
        search_topk(q, _unit(3, 5, 6), 2)
    with pytest.raises(InvalidInputError, match="NaN"):
        search_topk(np.full((1, 4), np.nan), d, 2)
    with pytest.raises(InvalidInputError):
        search_topk(q[0], d, 2)
    with pytest.raises(InvalidInputError):
        search_topk(q, d, 0)


def test_build_run_feeds_evaluate() -> None:
    q, d = _unit(2, 8, 7), _unit(6, 8, 8)
    idx, scores = search_topk(q, d, 3)
    doc_ids = [f"doc{i}" for i in range(6)]
    run = build_run(["qa", "qb"], doc_ids, idx, scores)
    assert list(run) == ["qa", "qb"]
    assert list(run["qa"]) == [doc_ids[i] for i in idx[0]]
    assert all(isinstance(s, float) for s in run["qb"].values())
    qrels = {"qa": {doc_ids[idx[0, 0]]: 1}, "qb": {doc_ids[idx[1, 2]]: 1}}
    assert evaluate(run, qrels, ks=(1,))["mrr@1"] == 0.5
    with pytest.raises(InvalidInputError):
        build_run(["qa"], doc_ids, idx, scores)


# --------------------------------------------------------------------------------------------
# Correlations and cosine
# --------------------------------------------------------------------------------------------


def test_spearman_and_pearson_equal_scipy_on_data_with_ties() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(42)
    for _ in range(20):
        n = int(rng.integers(5, 300))
        a = rng.integers(0, 6, n).astype(float) / 2  # heavy ties, like STS gold scores
        b = np.round(a + rng.normal(0, 1, n), 1)  # some ties
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
        assert pearson(a, b) == pytest.approx(stats.pearsonr(a, b).statistic, abs=1e-12)
    x = rng.normal(size=100)
    assert spearman(x, x) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)


def test_spearman_hand_computed_with_ties() -> None:
    # ranks a: 1, 2.5, 2.5, 4 ; ranks b: 1, 2, 3, 4
    ra, rb = np.array([1, 2.5, 2.5, 4]), np.array([1, 2, 3, 4])
    ra_c, rb_c = ra - ra.mean(), rb - rb.mean()
    expected = ra_c @ rb_c / math.sqrt((ra_c @ ra_c) * (rb_c @ rb_c))
    assert spearman([1.0, 2.0, 2.0, 3.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(expected)


def test_correlation_edge_cases() -> None:
    assert math.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    with pytest.raises(InvalidInputError):
        spearman([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(InvalidInputError):
        pearson([1.0], [2.0])
    with pytest.raises(InvalidInputError):
        pearson([1.0, math.nan], [2.0, 3.0])


def test_cosine_scores_rowwise() -> None:
    u = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    v = np.array([[2.0, 0.0], [-4.0, 3.0], [1.0, 1.0]], dtype=np.float32)
    out = cosine_scores(u, v)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [1.0, 0.0, 0.0], atol=1e-12)
    with pytest.raises(InvalidInputError):
        cosine_scores(u, v[:2])


# --------------------------------------------------------------------------------------------
# BEIR reader
# --------------------------------------------------------------------------------------------

_CORPUS: list[dict[str, Any]] = [
    {"_id": "d1", "title": "Title one", "text": "Text one.", "metadata": {}},
    {"_id": "d2", "title": "", "text": "  Text two.  "},
    {"_id": 3, "text": "Numeric id, no title."},
]
_QUERIES: list[dict[str, Any]] = [
    {"_id": "q1", "text": "first query"},
    {"_id": "q2", "text": "second query"},
    {"_id": "q3", "text": "judged only in train"},
]
_TEST_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\t3\t2\n"


def _write_jsonl(path: Path, rows: list[dict[str, Any]], gz: bool = False) -> None:
    data = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(data)
    else:
        path.write_text(data, encoding="utf-8")


def _make_beir(folder: Path, gz: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _write_jsonl(folder / ("corpus.jsonl.gz" if gz else "corpus.jsonl"), _CORPUS, gz=gz)
    _write_jsonl(folder / "queries.jsonl", _QUERIES)
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text(_TEST_QRELS, encoding="utf-8")
    (folder / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq3\td1\t1\n", encoding="utf-8"
    )
    return folder


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_load_beir_tiny_folder(tmp_path: Path, gz: bool) -> None:
    ds = load_beir(_make_beir(tmp_path / "tiny", gz=gz))
    assert isinstance(ds, BeirDataset)
    assert ds.corpus == {
        "d1": {"title": "Title one", "text": "Text one."},
        "d2": {"title": "", "text": "  Text two.  "},
        "3": {"title": "", "text": "Numeric id, no title."},
    }
    assert ds.queries == {"q1": "first query", "q2": "second query"}  # q3 is not judged in test
    assert ds.qrels == {"q1": {"d1": 1, "d2": 0}, "q2": {"3": 2}}
    assert repr(ds) == "BeirDataset(docs=3, queries=2, judgements=3)"
    train = load_beir(tmp_path / "tiny", split="train")
    assert train.queries == {"q3": "judged only in train"}


def test_load_jsonl_corpus_plain_and_gz(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "c.jsonl", _CORPUS)
    _write_jsonl(tmp_path / "c.jsonl.gz", _CORPUS, gz=True)
    plain = load_jsonl_corpus(tmp_path / "c.jsonl")
    assert plain == load_jsonl_corpus(str(tmp_path / "c.jsonl.gz"))
    assert list(plain) == ["d1", "d2", "3"]


def test_document_text_follows_beir_convention() -> None:
    assert document_text({"title": "T", "text": "body"}) == "T body"
    assert document_text({"title": "", "text": " body "}) == "body"
    assert document_text({"text": " body "}) == "body"
    assert document_text({"title": None, "text": "body"}) == "body"
    assert document_text({"title": " T ", "text": ""}) == "T"
    with pytest.raises(DataFormatError):
        document_text({"title": "T"})


def test_load_beir_missing_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="folder not found"):
        load_beir(tmp_path / "nope")
    folder = _make_beir(tmp_path / "ds")
    with pytest.raises(DataFormatError, match=r"qrels[/\\]dev\.tsv"):
        load_beir(folder, split="dev")
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl"):
        load_beir(folder)
    with pytest.raises(DataFormatError, match=r"missing\.jsonl"):
        load_jsonl_corpus(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gz"])
def test_malformed_json_line_names_file_and_line(tmp_path: Path, gz: bool) -> None:
    folder = _make_beir(tmp_path / "ds", gz=gz)
    lines = [json.dumps(r) for r in _CORPUS]
    lines[1] = '{"_id": "d2", "text": "unterminated'
    name = "corpus.jsonl.gz" if gz else "corpus.jsonl"
    data = "\n".join(lines) + "\n"
    if gz:
        (folder / name).write_bytes(gzip.compress(data.encode()))
    else:
        (folder / name).write_text(data, encoding="utf-8")
    with pytest.raises(DataFormatError, match=rf"{name}:2: invalid JSON") as info:
        load_beir(folder)
    assert isinstance(info.value, CtxembError) and isinstance(info.value, ValueError)
    assert "(Unterminated string starting at column 23)" in str(info.value)


@pytest.mark.parametrize("line", ['{"_id": "d", "text": "a\tb"}', '{"_id": "d", "text": "a'])
def test_a_json_message_ending_in_at_is_not_doubled(tmp_path: Path, line: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"c\.jsonl:1: invalid JSON") as info:
        load_jsonl_corpus(path)
    assert " at at " not in str(info.value) and " at column " in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"title": "x", "text": "y"}\n', r"c\.jsonl:1: missing or invalid '_id'"),
        ('{"_id": "a", "text": "y"}\n\n{"_id": "b"}\n', r"c\.jsonl:3: .*'b' has no string 'text'"),
        ('{"_id": "a", "text": "y"}\n{"_id": "a", "text": "z"}\n', r"c\.jsonl:2: duplicate"),
        ('["not", "an", "object"]\n', r"c\.jsonl:1: expected a JSON object"),
    ],
)
def test_corpus_record_errors(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "c.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_jsonl_corpus(tmp_path / "c.jsonl")


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\n", r"test\.tsv:2: expected 3"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\thigh\n", r"test\.tsv:3: score 'high'"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n", r"test\.tsv:3: conflicting"),
        ("query-id\tcorpus-id\tscore\nq9\td1\t1\n", r"not in .*queries\.jsonl.*q9"),
        ("query-id\tcorpus-id\tscore\n", r"test\.tsv: no judgements"),
    ],
)
def test_qrels_errors(tmp_path: Path, qrels: str, message: str) -> None:
    folder = _make_beir(tmp_path / "ds")
    (folder / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_beir(folder)


def test_qrels_without_header_keeps_first_row(tmp_path: Path) -> None:
    folder = _make_beir(tmp_path / "ds")
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\r\nq2\t3\t1\r\n", encoding="utf-8")
    assert load_beir(folder).qrels == {"q1": {"d1": 1}, "q2": {"3": 1}}


# --------------------------------------------------------------------------------------------
# STS reader
# --------------------------------------------------------------------------------------------


def test_load_sts_tab_format_with_extra_columns_and_quotes(tmp_path: Path) -> None:
    path = tmp_path / "sts.csv"
    path.write_text(
        "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man plays.\tA man is playing.\n"
        'main-forums\tanswer-answer\t2016\t0002\t1.5\tHe said "hi\tShe left.\tsrc1\tsrc2\n'
        "\n",
        encoding="utf-8",
    )
    pairs = load_sts(path)
    assert len(pairs) == 2
    np.testing.assert_array_equal(pairs.scores, [5.0, 1.5])
    assert pairs.sentences1 == ["A man plays.", 'He said "hi']
    assert pairs.sentences2 == ["A man is playing.", "She left."]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("g\tf\t2012\t1\t2.0\tonly one sentence\n", r"sts\.csv:2: expected at least 7"),
        ("g\tf\t2012\t1\tn/a\ts1\ts2\n", r"sts\.csv:2: score 'n/a'"),
        ("g\tf\t2012\t1\tnan\ts1\ts2\n", r"sts\.csv:2: score 'nan'"),
    ],
)
def test_load_sts_errors(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "sts.csv"
    path.write_text("g\tf\t2012\t0\t1.0\ts1\ts2\n" + line, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_sts(path)
    with pytest.raises(DataFormatError, match="missing file"):
        load_sts(tmp_path / "absent.csv")


# --------------------------------------------------------------------------------------------
# Real data in shared/data
# --------------------------------------------------------------------------------------------


def _shared(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared evaluation data not found at {path}")
    return path


def test_scifact_real_data() -> None:
    ds = load_beir(_shared("scifact"), split="test")
    assert len(ds.corpus) == 5183
    assert len(ds.queries) == 300
    assert sum(len(j) for j in ds.qrels.values()) == 339
    assert set(ds.queries) == set(ds.qrels)
    # Every judged document exists in the corpus.
    assert all(d in ds.corpus for judged in ds.qrels.values() for d in judged)
    assert ds.qrels["1"] == {"31715818": 1}


def test_sts_benchmark_real_data() -> None:
    pairs = load_sts(_shared("stsbenchmark", "sts-test.csv"))
    assert len(pairs) == 1379
    assert len(pairs.sentences1) == len(pairs.sentences2) == 1379
    assert pairs.scores.min() >= 0.0 and pairs.scores.max() <= 5.0
    assert pairs.scores[0] == 2.5
    assert pairs.sentences1[0] == "A girl is styling her hair."
    assert pairs.sentences2[0] == "A girl is brushing her hair."
