"""Two-stage search over real Chroma (embedded and a server), in core, the adapter and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import DOCS, fresh_name

from ctxemb_chroma import open_collection, search, shortlist
from ctxemb_core import demo as demo_data
from ctxemb_core.cli import main
from ctxemb_core.documents import TEXT_KEY, text_digest
from ctxemb_core.errors import ContractMismatchError, InvalidInputError, RerankerMismatchError
from ctxemb_core.rerank import (
    Candidate,
    RerankerContract,
    ScoreThreshold,
    Shortlist,
    reranker_for,
    two_stage,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def maxsim_contract(minilm_contract) -> RerankerContract:
    c = minilm_contract
    return RerankerContract(
        kind="late_interaction",
        model=c.model,
        weights=c.weights,
        max_tokens=c.max_tokens,
        encoder=c,
        token_normalize=True,
        skip=("marker", "special"),
    )


@pytest.fixture(scope="module")
def reranker(maxsim_contract):
    return reranker_for(maxsim_contract)


@pytest.fixture
def docs(client, minilm):
    collection = open_collection(client, fresh_name(), minilm)
    collection.add(list(DOCS), list(DOCS.values()), metadatas=[{"k": i} for i in DOCS])
    return collection


@pytest.mark.transport
def test_search_reranks_the_stamped_shortlist_and_names_both_contracts(docs, reranker, minilm):
    query = "what keeps a river bank from washing away"
    first = shortlist(docs, query, 5)
    assert len(first.candidates) == 5
    assert first.index_fingerprint == docs.contract.fingerprint
    # The first-stage score is the contract's cosine, best first.
    q = minilm.embed_query(query)
    for c in first.candidates:
        assert c.score == pytest.approx(float(q @ minilm.embed_documents([c.text])[0]), abs=1e-4)
        # The caller's metadata, and the digest of the text the stored vector was made from.
        assert c.metadata == {"k": c.id, TEXT_KEY: text_digest(c.text)}
    assert [c.score for c in first.candidates] == sorted(
        (c.score for c in first.candidates), reverse=True
    )

    result = search(docs, query, reranker, k=5, n=3)
    assert len(result) == 3
    assert result.index_fingerprint == docs.contract.fingerprint
    assert result.reranker_fingerprint == reranker.fingerprint
    assert result.shortlisted == 5
    assert result.rerank_seconds > 0 and result.shortlist_seconds > 0
    # Exactly the reranker's order and scores over the shortlist's texts.
    texts = [c.text for c in first.candidates]
    expected = reranker.rerank(query, texts, ids=[c.id for c in first.candidates], top_k=3)
    assert result.ids == expected.ids
    np.testing.assert_allclose([h.score for h in result], expected.scores, rtol=1e-6)
    for hit in result:
        assert first.candidates[hit.first_rank].id == hit.id
        assert hit.first_score == pytest.approx(first.candidates[hit.first_rank].score)
        assert hit.metadata == {"k": hit.id, TEXT_KEY: text_digest(hit.text)}


def test_search_takes_filters_and_fewer_records_than_k(docs, reranker):
    result = search(docs, "tea", reranker, k=50, n=6)
    assert sorted(result.ids) == sorted(DOCS)  # six records: all are candidates
    only = search(docs, "tea", reranker, k=3, n=2, where={"k": {"$in": ["bank", "river"]}})
    assert set(only.ids) == {"bank", "river"}


def test_a_mismatched_querier_or_threshold_returns_nothing(docs, reranker, minilm_contract):
    from ctxemb_core import Embedder

    with pytest.raises(ContractMismatchError) as info:
        search(docs, "tea", reranker, embedder=Embedder(minilm_contract.with_(normalize=False)))
    assert info.value.fields == ("normalize",)
    other = reranker.contract.with_(token_normalize=False)
    with pytest.raises(RerankerMismatchError) as mismatch:
        search(docs, "tea", reranker, score_threshold=ScoreThreshold(1.0, other))
    assert mismatch.value.fields == ("token_normalize",)
    with pytest.raises(InvalidInputError, match="n=5 results cannot come from k=2"):
        search(docs, "tea", reranker, k=2, n=5)
    with pytest.raises(InvalidInputError, match="GuardedCollection"):
        search(docs.raw, "tea", reranker)


def test_a_threshold_keeps_only_the_hits_at_or_above_it(docs, reranker):
    every = search(docs, "tea", reranker, k=6, n=6)
    cut = float(every.hits[2].score)
    kept = search(
        docs, "tea", reranker, k=6, n=6, score_threshold=ScoreThreshold(cut, reranker.contract)
    )
    assert kept.ids == every.ids[:3]
    assert all(h.score >= cut for h in kept)


def test_two_stage_refuses_a_threshold_before_the_first_stage_runs(reranker):
    calls: list[tuple[str, int]] = []

    def first_stage(query: str, k: int) -> Shortlist:
        calls.append((query, k))
        return Shortlist((Candidate("a", "green tea", 0.5),), "0" * 64)

    other = reranker.contract.with_(skip=("special",))
    with pytest.raises(RerankerMismatchError):
        two_stage("tea", first_stage, reranker, score_threshold=ScoreThreshold(0.0, other))
    assert calls == []
    result = two_stage("tea", first_stage, reranker, k=4, n=1)
    assert calls == [("tea", 4)] and result.ids == ["a"] and result.index_fingerprint == "0" * 64
    with pytest.raises(InvalidInputError, match="must return a Shortlist"):
        two_stage("tea", lambda q, k: [("a", "tea")], reranker)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidInputError, match="twice"):
        Shortlist((Candidate("a", "x", 1.0), Candidate("a", "y", 0.5)), "0" * 64)
    with pytest.raises(InvalidInputError, match="fingerprint"):
        Shortlist((), "abc")
    with pytest.raises(InvalidInputError, match="ctxemb Reranker"):
        two_stage("tea", first_stage, object())  # type: ignore[arg-type]


def test_the_cli_reranks_with_maxsim_and_prints_both_fingerprints(tmp_path, capsys):
    store = ["--path", str(tmp_path / "store"), "--collection", "demo"]
    assert main(["index", str(demo_data.corpus_path()), *store]) == 0
    capsys.readouterr()
    code = main(
        [
            "query",
            "how do I keep slugs off lettuce",
            *store,
            "--rerank",
            "maxsim",
            "--candidates",
            "8",
            "-k",
            "3",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    row = json.loads(out.splitlines()[0])
    assert len(row["ids"]) == 3 and row["scores"] == sorted(row["scores"], reverse=True)
    assert len(row["reranker_fingerprint"]) == 64 and len(row["index_fingerprint"]) == 64
    assert row["reranker_fingerprint"] != row["index_fingerprint"]
    code = main(["query", "slugs", *store, "--rerank", "maxsim", "--candidates", "8", "-k", "2"])
    text = capsys.readouterr().out
    assert code == 0 and "late_interaction" in text and "first stage #" in text
    # Refused before the store is read: fewer candidates than results, a folder that is none.
    code = main(["query", "slugs", *store, "--rerank", "maxsim", "--candidates", "2", "-k", "3"])
    assert code == 2 and "--candidates 2 is fewer than --top-k 3" in capsys.readouterr().err
    code = main(["query", "slugs", *store, "--rerank", str(tmp_path / "nothing")])
    assert code == 2 and "ModelNotFoundError" in capsys.readouterr().err


def test_the_two_stage_example_runs_as_documented(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("two_stage_example", EXAMPLES / "two_stage.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--path", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "24 documents" in out
    assert "refused: RerankerMismatchError, fields ('token_normalize',)" in out
    assert "refused: ContractMismatchError, fields ('normalize',)" in out
    assert out.count("reranker ") >= 5
