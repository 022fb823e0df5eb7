"""Evaluation paths, runners, run files and the BM25 baseline, on small real data.

The bundled MiniLM embeds; Chroma is real (embedded, and a server for the tests marked
``transport``, through the ``client`` fixture). The core's exact search is the reference each
store path is compared with.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from conftest import DOCS, fresh_name

import ctxemb_core.eval as ev
from ctxemb_core.errors import (
    ContractMismatchError,
    DataFormatError,
    InvalidInputError,
    MissingDependencyError,
)
from ctxemb_core.eval import (
    BeirDataset,
    MemoryPath,
    SearchPath,
    StsPairs,
    bm25_run,
    cosine_scores,
    evaluate,
    evaluate_retrieval,
    evaluate_sts,
    read_run,
    write_pair_scores,
    write_run,
)
from ctxemb_core.eval.bm25 import Bm25Settings
from ctxemb_core.eval.runner import retrieval_cutoffs

QUERIES = {
    "q-tea": "how is green tea processed",
    "q-bike": "bicycle chain maintenance",
    "q-moon": "why does the moon change shape",
    "q-bank": "interest rates and central banks",
}
QRELS = {
    "q-tea": {"tea": 1},
    "q-bike": {"bike": 2, "slug": 0},
    "q-moon": {"moon": 1},
    "q-bank": {"bank": 1, "river": 0},
}
PAIRS = StsPairs(
    scores=np.array([5.0, 0.2, 3.8, 1.0, 4.4, 0.0]),
    sentences1=[
        "A man is playing a guitar.",
        "A woman is slicing onions.",
        "Kids play football in the park.",
        "The stock market fell sharply.",
        "A cat sleeps on the sofa.",
        "Rain is expected tomorrow.",
    ],
    sentences2=[
        "A man plays the guitar.",
        "A dog runs across the beach.",
        "Children are playing soccer outside.",
        "A chef cooks pasta.",
        "A kitten is napping on a couch.",
        "He bought a new laptop.",
    ],
)


def dataset() -> BeirDataset:
    corpus = {i: {"title": "", "text": t} for i, t in DOCS.items()}
    return BeirDataset(corpus=corpus, queries=dict(QUERIES), qrels=QRELS)


@pytest.fixture(scope="module")
def memory_path(minilm) -> MemoryPath:
    path = MemoryPath(minilm)
    path.index(DOCS)
    return path


# -- the package surface ---------------------------------------------------------------------


def test_eval_exports_exactly_the_intended_names():
    assert ev.__all__ == sorted(ev.__all__, key=lambda n: (not n.isupper(), n))
    assert set(ev.__all__) == {
        "VIAS",
        "BeirDataset",
        "MemoryPath",
        "RetrievalReport",
        "SearchPath",
        "StsPairs",
        "StsReport",
        "bm25_run",
        "build_run",
        "cosine_scores",
        "document_text",
        "evaluate",
        "evaluate_retrieval",
        "evaluate_sts",
        "load_beir",
        "load_jsonl_corpus",
        "load_sts",
        "map_at_k",
        "mrr_at_k",
        "ndcg_at_k",
        "pearson",
        "precision_at_k",
        "read_run",
        "recall_at_k",
        "search_topk",
        "spearman",
        "write_pair_scores",
        "write_run",
    }
    assert ev.VIAS[:3] == ("memory", "chroma", "chroma-server")


# -- MemoryPath ------------------------------------------------------------------------------


def test_memory_path_is_a_search_path_and_finds_each_answer(memory_path, minilm):
    assert isinstance(memory_path, SearchPath)
    assert memory_path.via == "memory" and memory_path.fingerprint == minilm.fingerprint
    run = memory_path.search(QUERIES, k=3)
    assert {q: next(iter(docs)) for q, docs in run.items()} == {
        "q-tea": "tea",
        "q-bike": "bike",
        "q-moon": "moon",
        "q-bank": "bank",
    }
    assert all(len(docs) == 3 for docs in run.values())
    # The score is the cosine of the contract's vectors, query role against document role.
    q = minilm.embed_queries([QUERIES["q-tea"]])
    d = minilm.embed_documents([DOCS["tea"]])
    assert run["q-tea"]["tea"] == pytest.approx(float(cosine_scores(q, d)[0]), abs=1e-6)


def test_memory_path_indexes_only_what_it_lacks(minilm):
    path = MemoryPath(minilm)
    assert path.index(DOCS) == len(DOCS)
    assert path.index(DOCS) == 0 and path.count() == len(DOCS)
    # The same id under another text is embedded again (an upsert), not kept stale.
    assert path.index({"tea": "Black tea leaves are oxidised."}) == 1
    assert path.count() == len(DOCS)
    run = path.search({"q": "oxidised black tea"}, k=1)
    assert list(run["q"]) == ["tea"]
    # k beyond the corpus returns the whole corpus.
    assert len(path.search({"q": "tea"}, k=100)["q"]) == len(DOCS)
    path.close()
    assert path.count() == 0


def test_memory_path_pair_scores_are_row_cosines(memory_path, minilm):
    scores = memory_path.pair_scores(PAIRS.sentences1, PAIRS.sentences2)
    expected = cosine_scores(
        minilm.embed_queries(PAIRS.sentences1), minilm.embed_documents(PAIRS.sentences2)
    )
    assert scores.dtype == np.float64 and scores.shape == (len(PAIRS),)
    np.testing.assert_allclose(scores, expected, atol=1e-6)


def test_memory_path_refuses_bad_arguments(minilm, memory_path):
    with pytest.raises(InvalidInputError, match="Embedder"):
        MemoryPath(minilm.contract)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="index"):
        MemoryPath(minilm).search({"q": "tea"}, k=1)
    with pytest.raises(InvalidInputError, match="mapping"):
        memory_path.index(["a", "b"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="empty"):
        memory_path.index({"": "text"})
    with pytest.raises(InvalidInputError, match="string"):
        memory_path.index({"a": None})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="k must be a positive integer"):
        memory_path.search({"q": "tea"}, k=0)
    with pytest.raises(InvalidInputError, match="pair up"):
        memory_path.pair_scores(["a", "b"], ["a"])
    with pytest.raises(InvalidInputError, match="empty"):
        memory_path.pair_scores([], [])


# -- the Chroma path, embedded and server -----------------------------------------------------


@pytest.mark.transport
def test_chroma_path_agrees_with_exact_search(client, minilm, memory_path):
    from ctxemb_chroma import eval_path

    name = fresh_name()
    path = eval_path(client, name, minilm)
    assert isinstance(path, SearchPath)
    assert path.via == "chroma" and path.fingerprint == minilm.fingerprint
    assert path.index(DOCS) == len(DOCS)
    assert path.index(DOCS) == 0  # nothing twice
    run = path.search(QUERIES, k=len(DOCS) + 5)
    exact = memory_path.search(QUERIES, k=len(DOCS))
    for q in QUERIES:
        assert list(run[q]) == list(exact[q])  # same order: six documents leave HNSW exact
        np.testing.assert_allclose(list(run[q].values()), list(exact[q].values()), atol=1e-5)
    path.close()


def test_chroma_path_pair_scores_are_the_stores_own(client, minilm, memory_path):
    from ctxemb_chroma import eval_path

    path = eval_path(client, fresh_name(), minilm, via="chroma-server", sample=0)
    assert path.via == "chroma-server"
    scores = path.pair_scores(PAIRS.sentences1, PAIRS.sentences2)
    np.testing.assert_allclose(
        scores, memory_path.pair_scores(PAIRS.sentences1, PAIRS.sentences2), atol=1e-5
    )
    stored = path.collection.get(ids=["0"], include=["documents"])
    assert stored["documents"] == [PAIRS.sentences2[0]]
    # Other pairs under the same ids: the stored texts are replaced, never scored stale.
    swapped = path.pair_scores(PAIRS.sentences2[:2], PAIRS.sentences1[:2])
    np.testing.assert_allclose(swapped, scores[:2], atol=1e-5)
    assert path.collection.get(ids=["0"], include=["documents"])["documents"] == [
        PAIRS.sentences1[0]
    ]


@pytest.mark.transport
def test_chroma_path_refuses_another_contract(client, minilm):
    from ctxemb_chroma import eval_path

    name = fresh_name()
    eval_path(client, name, minilm).index(DOCS)
    with pytest.raises(ContractMismatchError, match="pooling"):
        eval_path(client, name, minilm.contract.with_(pooling="cls"))  # type: ignore[arg-type]


# -- runners ---------------------------------------------------------------------------------


def test_evaluate_retrieval_reports_every_metric_and_the_run(minilm):
    report = evaluate_retrieval(MemoryPath(minilm), dataset(), k=100)
    assert report.via == "memory" and report.fingerprint == minilm.fingerprint
    assert (report.documents, report.indexed, report.queries, report.k) == (6, 6, 4, 100)
    assert report.metrics == evaluate(report.run, QRELS, ks=(1, 10, 100))
    assert report.metrics["ndcg@10"] == 1.0 and report.metrics["map@100"] == 1.0
    assert set(report.seconds) == {"index", "search"}
    assert report.rounded()["precision@10"] == round(report.metrics["precision@10"], 5)
    assert "run" not in repr(report)


def test_retrieval_cutoffs_follow_the_depth():
    assert retrieval_cutoffs(100) == (1, 10, 100)
    assert retrieval_cutoffs(1000) == (1, 10, 100, 1000)
    assert retrieval_cutoffs(5) == (1, 5)
    with pytest.raises(InvalidInputError):
        retrieval_cutoffs(0)


def test_evaluate_sts_correlates_the_paths_scores(minilm):
    report = evaluate_sts(MemoryPath(minilm), PAIRS)
    assert report.pairs == len(PAIRS) and report.via == "memory"
    assert report.spearman == pytest.approx(ev.spearman(report.scores, PAIRS.scores))
    assert report.pearson == pytest.approx(ev.pearson(report.scores, PAIRS.scores))
    assert report.spearman > 0.8  # the paraphrases score above the unrelated pairs
    assert report.metrics() == {"spearman": report.spearman, "pearson": report.pearson}
    one = StsPairs(np.array([1.0]), ["a"], ["b"])
    with pytest.raises(InvalidInputError, match="at least 2"):
        evaluate_sts(MemoryPath(minilm), one)


# -- run files -------------------------------------------------------------------------------


def test_run_file_is_in_trec_eval_order_and_reads_back_exactly(tmp_path):
    run = {
        "q2": {"b": 0.5, "a": 0.5, "c": 0.25, "z": 0.5},
        "q1": {"d1": np.float32(0.1), "d2": 1 / 3},
    }
    path = tmp_path / "out" / "dense.run"
    assert write_run(run, path, tag="mine") == 6
    lines = path.read_text().splitlines()
    assert lines == [
        # Queries in the run's order; ties by document id descending, as trec_eval ranks them.
        "q2 Q0 z 1 0.5 mine",
        "q2 Q0 b 2 0.5 mine",
        "q2 Q0 a 3 0.5 mine",
        "q2 Q0 c 4 0.25 mine",
        f"q1 Q0 d2 1 {1 / 3!r} mine",
        f"q1 Q0 d1 2 {float(np.float32(0.1))!r} mine",
    ]
    back = read_run(path)
    assert back == {q: {d: float(s) for d, s in docs.items()} for q, docs in run.items()}


@pytest.mark.parametrize(
    ("run", "tag", "fragment"),
    [
        ({"q 1": {"a": 1.0}}, "t", "query id"),
        ({"q": {"a b": 1.0}}, "t", "document id"),
        ({"q": {"a": 1.0}}, "my tag", "tag"),
        ({"q": {"a": math.nan}}, "t", "score"),
    ],
)
def test_run_file_refuses_what_it_cannot_write(run, tag, fragment, tmp_path):
    with pytest.raises(InvalidInputError, match=fragment):
        write_run(run, tmp_path / "x.run", tag=tag)
    assert not (tmp_path / "x.run").exists()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("q Q0 a 1 0.5\n", "expected 6 columns"),
        ("q Q0 a 1 high t\n", "not a finite number"),
        ("q Q0 a 1 0.5 t\nq Q0 a 2 0.4 t\n", "lists 'a' twice"),
    ],
)
def test_a_malformed_run_file_names_file_and_line(text, fragment, tmp_path):
    path = tmp_path / "bad.run"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=fragment):
        read_run(path)
    with pytest.raises(DataFormatError, match="missing file"):
        read_run(tmp_path / "none.run")


def test_pair_scores_file_is_one_row_per_pair(tmp_path):
    path = tmp_path / "sts.tsv"
    n = write_pair_scores(path, [1.0, 2.5], [0.5, 0.25], ["a\tb", "c"], ["d\ne", "f"])
    assert n == 2
    assert path.read_text().splitlines() == [
        "pair\tgold\tscore\tsentence1\tsentence2",
        "0\t1.0\t0.5\ta b\td e",
        "1\t2.5\t0.25\tc\tf",
    ]
    with pytest.raises(InvalidInputError, match="length"):
        write_pair_scores(path, [1.0], [0.5, 0.1], ["a"], ["b"])


# -- the BM25 baseline -----------------------------------------------------------------------


def test_bm25_ranks_the_term_matches_and_leaves_out_non_matches():
    run = bm25_run(dataset(), k=100)
    assert list(run) == list(QUERIES)
    assert next(iter(run["q-bike"])) == "bike"  # "bicycle", "chain" are in that document alone
    assert next(iter(run["q-bank"])) == "bank"  # "central", "bank", "interest", "rates"
    # Documents sharing no term with a query are not in its run (no zero scores).
    assert all(score > 0 for docs in run.values() for score in docs.values())
    # A query of stop words alone has no term left: an empty run, not an error.
    nothing = BeirDataset(
        corpus=dataset().corpus, queries={"q": "the of and"}, qrels={"q": {"tea": 1}}
    )
    assert bm25_run(nothing) == {"q": {}}
    assert evaluate(bm25_run(dataset()), QRELS)["ndcg@10"] > 0.5


def test_bm25_settings_are_named_and_k_is_checked():
    line = Bm25Settings().describe()
    assert line.startswith("bm25s ") and "k1=1.5" in line and "english" in line
    with pytest.raises(InvalidInputError):
        bm25_run(dataset(), k=0)


def test_bm25_without_its_extra_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # an import of it now fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'ctxemb\[eval\]'"):
        bm25_run(dataset())
