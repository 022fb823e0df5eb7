"""The hybrid contract: fingerprint, strict JSON, diff by side and kind; the lexical recipe and
the fusion validated; the analyzer the one ``bm25s`` applies, and BM25 scores equal to its."""

from __future__ import annotations

import json
import pickle

import bm25s
import numpy as np
import pytest
import Stemmer

from ctxemb_core.contract import DiffKind
from ctxemb_core.errors import (
    DataFormatError,
    HybridMismatchError,
    InvalidContractError,
    InvalidInputError,
)
from ctxemb_core.hybrid import (
    Analyzer,
    Fusion,
    HybridContract,
    HybridDiffKind,
    LexicalContract,
    LexicalIndex,
    fuse,
)
from ctxemb_core.hybrid.guard import check_caller

TEXTS = [
    "Mitochondria produce most of the cell's supply of adenosine triphosphate.",
    "The running dogs were jumping over fences in the park.",
    "Insulin resistance improves after reducing carbohydrate intake in patients.",
    "Dogs and cats are common pets; a dog runs faster than most cats.",
    "Adenosine triphosphate (ATP) transports chemical energy within cells.",
    "Carbohydrate-rich diets and insulin: a randomised trial of 150 patients.",
]
QUERIES = ["how do cells make ATP", "dog running", "insulin and carbohydrates", "unrelated words"]


@pytest.fixture(scope="module")
def dense(minilm_contract):
    return minilm_contract


def test_fingerprint_json_round_trip_and_strictness(dense):
    h = HybridContract(dense)
    again = HybridContract.from_json(h.to_json())
    assert again == h and again.fingerprint == h.fingerprint
    assert h.fingerprint != HybridContract(dense, fusion=Fusion(k=61)).fingerprint
    data = json.loads(h.to_json())
    with pytest.raises(DataFormatError, match="expected"):
        HybridContract.from_dict({**data, "extra": 1})
    with pytest.raises(DataFormatError, match="missing"):
        HybridContract.from_dict(
            {**data, "lexical": {k: v for k, v in data["lexical"].items() if k != "k1"}}
        )
    with pytest.raises(DataFormatError, match="repeats"):
        HybridContract.from_json('{"schema":1,"schema":1}')
    with pytest.raises(DataFormatError):
        HybridContract.from_json("not json")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"k1": -1}, "k1"),
        ({"b": 1.5}, "b"),
        ({"stemmer": "porter"}, "stemmer"),
        ({"stopwords": "fr"}, "stopwords"),
        ({"token_pattern": "("}, "token_pattern"),
        ({"method": "tfidf"}, "method"),
        ({"vocabulary": "sha256:" + "0" * 64}, "together"),
        ({"lowercase": "yes"}, "lowercase"),
    ],
)
def test_a_bad_lexical_recipe_is_refused_naming_the_field(changes, message):
    with pytest.raises(InvalidContractError, match=message):
        LexicalContract(**changes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k"),
        ({"depth": 0}, "depth"),
        ({"method": "max"}, "method"),
        ({"weights": (1, 1)}, "rrf fusion takes k only"),
        ({"method": "weighted"}, "weights"),
        ({"method": "weighted", "weights": (0, 0)}, "weights"),
        ({"method": "weighted", "weights": (1, float("nan"))}, "weights"),
        ({"method": "weighted", "weights": (1, 1), "normalization": "z"}, "normalization"),
    ],
)
def test_a_bad_fusion_is_refused(kwargs, message):
    with pytest.raises(InvalidContractError, match=message):
        Fusion(**kwargs)


def test_diff_names_fields_by_side_and_classifies_them(dense):
    base = HybridContract(dense)
    fusion = base.diff(base.with_(fusion=Fusion(k=10)))
    assert fusion.fields == ("fusion.k",) and fusion.kind is HybridDiffKind.QUERY_ONLY
    assert fusion.reindex == ()
    lexical = base.diff(base.with_(lexical=LexicalContract(stemmer="none")))
    assert lexical.fields == ("lexical.stemmer",)
    assert lexical.kind is HybridDiffKind.LEXICAL_REINDEX and lexical.reindex == ("lexical",)
    stops = base.diff(base.with_(lexical=LexicalContract(stopwords="none")))
    assert set(stops.fields) == {"lexical.stopwords", "lexical.stopwords_digest"}
    pooled = base.diff(base.with_(dense=dense.with_(pooling="cls"), fusion=Fusion(k=10)))
    assert pooled.fields == ("dense.pooling", "fusion.k")
    assert pooled.kind is HybridDiffKind.REEMBED and pooled.dense_kind is DiffKind.REEMBED
    assert pooled.reindex == ("dense",)
    prefix = base.diff(base.with_(dense=dense.with_(query_prefix="q: ")))
    assert prefix.kind is HybridDiffKind.QUERY_ONLY
    assert not base.diff(base)


def test_a_caller_recipe_is_compared_without_the_fitted_vocabulary(dense):
    index = LexicalIndex.fit(["a", "b"], TEXTS[:2])
    stamp = HybridContract(dense, index.contract)
    assert check_caller(stamp, stamp.recipe()) is stamp
    other = LexicalIndex.fit(["a", "b"], TEXTS[2:4]).contract
    with pytest.raises(HybridMismatchError) as err:
        check_caller(stamp, stamp.with_(lexical=other))
    assert err.value.fields == ("lexical.vocabulary",)
    with pytest.raises(HybridMismatchError) as err:
        check_caller(stamp, stamp.recipe().with_(fusion=Fusion(method="weighted", weights=(1, 1))))
    assert set(err.value.fields) == {
        "fusion.method",
        "fusion.k",
        "fusion.weights",
        "fusion.normalization",
    }
    assert "fusion.k: index=60, caller=None" in str(err.value)
    again = pickle.loads(pickle.dumps(err.value))
    assert again.fields == err.value.fields and str(again) == str(err.value)


def test_the_analyzer_is_bm25s_tokenize_with_pystemmer():
    recipe = LexicalContract()
    ours = [Analyzer(recipe).terms(t) for t in TEXTS]
    theirs = bm25s.tokenize(
        TEXTS,
        stopwords="en",
        stemmer=Stemmer.Stemmer("english"),
        return_ids=False,
        show_progress=False,
    )
    assert ours == theirs
    plain = Analyzer(LexicalContract(stemmer="none", stopwords="none")).terms(TEXTS[1])
    assert plain[:3] == ["the", "running", "dogs"]
    assert Analyzer(recipe).canary() != Analyzer(LexicalContract(stemmer="none")).canary()


def test_bm25_scores_equal_bm25s_lucene():
    ids = [f"d{i}" for i in range(len(TEXTS))]
    ours = LexicalIndex.fit(ids, TEXTS)
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    retriever.index(
        bm25s.tokenize(TEXTS, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    for q in QUERIES:
        terms = bm25s.tokenize(
            [q], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )[0]
        expected = (
            retriever.get_scores(terms)
            if terms and any(t in retriever.vocab_dict for t in terms)
            else np.zeros(len(TEXTS))
        )
        np.testing.assert_allclose(ours.scores(q), expected, rtol=1e-5, atol=1e-6)
    hits = ours.search("how do cells make ATP", 3)
    assert [h[0] for h in hits][:2] == ["d4", "d0"] and all(s > 0 for _, s in hits)
    assert ours.search("unrelated words", 3) == []


def test_an_update_equals_a_fit_of_the_new_corpus():
    ids = [f"d{i}" for i in range(len(TEXTS))]
    first = LexicalIndex.fit(ids[:4], TEXTS[:4])
    changed = first.updated(["d1", "d4", "d5"], ["dogs only", TEXTS[4], TEXTS[5]], delete=["d2"])
    fresh = LexicalIndex.fit(
        ["d0", "d3", "d1", "d4", "d5"], [TEXTS[0], TEXTS[3], "dogs only", TEXTS[4], TEXTS[5]]
    )
    assert changed.contract == fresh.contract and changed.state == fresh.state
    for q in QUERIES:
        assert changed.search(q, 5) == fresh.search(q, 5)
    assert changed.contract.vocabulary != first.contract.vocabulary


def test_bad_lexical_input_is_a_typed_error():
    with pytest.raises(InvalidInputError, match="repeat"):
        LexicalIndex.fit(["a", "a"], ["x", "y"])
    with pytest.raises(InvalidInputError, match="2 ids but 1 texts"):
        LexicalIndex.fit(["a", "b"], ["x"])
    with pytest.raises(InvalidInputError, match="string"):
        LexicalIndex.fit(["a"], [None])
    index = LexicalIndex.fit(["a"], ["x y"])
    with pytest.raises(InvalidInputError, match="k must be"):
        index.search("x", 0)


def test_rrf_and_weighted_fusion():
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.1)]
    lexical = [("c", 12.0), ("a", 3.0)]
    rrf = fuse(Fusion(), dense, lexical)
    assert rrf[0][0] == "a" and rrf[0][1] == pytest.approx(1 / 61 + 1 / 62)
    assert [d for d, _ in rrf] == ["a", "c", "b"]
    weighted = fuse(Fusion(method="weighted", weights=(1.0, 1.0)), dense, lexical)
    assert dict(weighted)["c"] == pytest.approx(0.0 + 1.0) and dict(weighted)["a"] == pytest.approx(
        1.0
    )
    assert [d for d, _ in fuse(Fusion(depth=1), dense, lexical)] == ["a", "c"]
    assert fuse(Fusion(), [], [], 3) == []
