"""examples/failure_modes.py runs end to end on a SciFact sample: every entry measures damage
without the contract, and ctxemb refuses each wrong recipe with the error that names it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "failure_modes.py"
#: Every judged document and a few of the corpus head: the ranking has distractors to err among.
DOCS = 400
ENTRIES = [
    "pooling",
    "normalize",
    "prefix",
    "encoders",
    "unit",
    "matryoshka",
    "langchain",
    "lexical",
    "dedup",
]


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("failure_modes_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def gallery(example, data_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One run over every judged document (339) plus the corpus head: 400 documents, 300 queries."""
    folder = tmp_path_factory.mktemp("gallery")
    out, figures = folder / "chart.png", folder / "figures.json"
    args = ["--docs", str(DOCS), "--data", str(data_dir / "scifact")]
    result = example.main([*args, "--out", str(out), "--json", str(figures)])
    return result, out, figures


def _entries(result: dict) -> dict[str, dict]:
    return {e["key"]: e for e in result["entries"]}


def _refusals(entry: dict) -> dict[str, dict]:
    return {r["call"]: r for r in entry["refusals"]}


def test_every_entry_is_there_with_its_seed_row_and_a_refusal(gallery) -> None:
    result, _, _ = gallery
    assert [e["key"] for e in result["entries"]] == ENTRIES
    assert result["documents"] == DOCS and result["queries"] == 300
    for entry in result["entries"]:
        assert entry["seed_row"]["symptom"] and entry["seed_row"]["fix"]
        assert entry["refusals"], entry["key"]
        for refusal in entry["refusals"]:
            assert refusal["error"].endswith("Error"), refusal  # not "(none: not refused)"
            assert refusal["message"]


#: A query-side prefix MiniLM was not trained with moves ranks, but not always down: on the
#: whole corpus it scores +0.004 (its measure is the rank change, asserted below).
PREFIX = 'MiniLM queries with "query: "'


def test_each_wrong_recipe_scores_below_the_right_contract(gallery) -> None:
    result, _, _ = gallery
    right = result["right"]["ndcg@10"]
    assert 0.5 < right <= 1.0
    charted = {label for e in result["entries"] for label in e["ndcg@10"]}
    assert len(charted) == 13 and PREFIX in charted
    for entry in result["entries"]:
        if entry["compare"] is not None:  # BM25's rows: against BM25's own (test below)
            continue
        for label, value in entry["ndcg@10"].items():
            if label != PREFIX:
                assert value < right, (entry["key"], label, value, right)
        # Through a store, the comparison is with the right contract through the same store.
        for label, value in entry["reference"].items():
            assert abs(value - right) < 0.02, (label, value)
            assert all(v < value for v in entry["ndcg@10"].values()), entry["key"]


def test_bm25_queried_with_another_analyzer_loses_and_the_hybrid_guard_refuses(gallery) -> None:
    lexical = _entries(gallery[0])["lexical"]
    ndcg, reference = lexical["ndcg@10"], lexical["reference"]
    stemmed = reference["BM25, the index's recipe on both sides"]
    assert lexical["compare"] == stemmed and stemmed > 0.5
    assert ndcg["BM25, queries not stemmed (index stemmed)"] < stemmed - 0.02
    kept = reference["BM25, stop words kept on both sides"]
    assert ndcg["BM25, queries drop stop words (index keeps them)"] != kept
    refusals = _refusals(lexical)
    stem = refusals["open_hybrid(index, lexical=stemmer 'none')"]
    assert stem["error"] == "HybridMismatchError" and stem["fields"] == ["lexical.stemmer"]
    assert stem["kind"] == "lexical_reindex"
    stops = refusals["hybrid.query(q, lexical=stop words 'none')"]
    assert stops["error"] == "HybridMismatchError"
    assert set(stops["fields"]) == {"lexical.stopwords", "lexical.stopwords_digest"}


def test_rank_changes_where_rank_change_is_the_measure(gallery) -> None:
    entries = _entries(gallery[0])
    normalize = entries["normalize"]["measures"]
    assert normalize["cosine_vs_inner_product"]["top10_set_changed"] > 0
    assert normalize["ndcg_cosine"] == pytest.approx(gallery[0]["right"]["ndcg@10"], abs=1e-4)
    moved = entries["prefix"]["measures"]["minilm_query_prefix"]
    assert moved["top10_set_changed"] > 0 and moved["mean_top10_overlap"] < 1.0
    tiny = entries["prefix"]["measures"]["tiny_e5"]
    assert tiny["top10_order_changed"] > 0 and tiny["mean_top10_overlap"] < 1.0
    assert "'query: '/'passage: '" in tiny["contract"]
    matryoshka = entries["matryoshka"]["measures"]
    assert matryoshka["renormalised_vs_not"]["top10_set_changed"] > 0
    # The truncated contract's vectors were derived from the un-normalised ones: as embedded.
    assert matryoshka["max_abs_gap_to_embedder"] < 1e-5
    # So were the CLS documents and the un-normalised ones, from one pass of token vectors.
    for key in ("pooling", "normalize"):
        assert entries[key]["measures"]["max_abs_gap_to_embedder"] < 1e-5, key
    encoders = entries["encoders"]["measures"]
    assert encoders["raw_chroma_accepted"] == DOCS and encoders["foreign_share_of_index"] == 0.5
    hits = encoders["foreign_relevant_hits_in_top10"]
    assert hits["mixed index"] < hits["right index"]


def test_a_pooled_vector_is_neither_token_vector(gallery) -> None:
    cosines = _entries(gallery[0])["unit"]["measures"]["cosines"]
    assert len(cosines) == 6
    assert all(0.0 < c < 0.95 for c in cosines.values()), cosines


@pytest.mark.parametrize(
    ("key", "error", "fields"),
    [
        ("pooling", "ContractMismatchError", ["pooling"]),
        ("normalize", "ContractMismatchError", ["normalize"]),
        ("prefix", "ContractMismatchError", ["query_prefix"]),
        ("matryoshka", "ContractMismatchError", ["truncate_dim"]),
        ("langchain", "ContractMismatchError", ["pooling"]),
        ("dedup", "ContractMismatchError", ["pooling"]),
    ],
)
def test_ctxemb_refuses_with_the_differing_field(gallery, key, error, fields) -> None:
    for refusal in _entries(gallery[0])[key]["refusals"]:
        assert refusal["error"] == error
        assert refusal["fields"] == fields
        assert any(line.startswith(f"{fields[0]}: index=") for line in refusal["detail"])


def test_stock_deduplication_skips_every_document_after_a_model_change(gallery) -> None:
    result = gallery[0]
    entries = _entries(result)
    measures, ndcg = entries["dedup"]["measures"], entries["dedup"]["ndcg@10"]
    assert measures["langchain_index_before"]["num_added"] == DOCS
    assert measures["langchain_index_after_model_change"] == {
        "num_added": 0,
        "num_updated": 0,
        "num_skipped": DOCS,
        "num_deleted": 0,
    }
    haystack = measures["haystack_documents_written"]
    assert haystack["before"] == haystack["stored"] == haystack["warnings"] == DOCS
    assert haystack["after_model_change"] == 0
    assert haystack["warning"] == "ID '<sha256>' already exists"
    # The damage: the new model's queries on the old vectors, below both contracts' own figures;
    # it is entry 1's one-sided mismatch, which the skipped re-index leaves in place.
    right, own = result["right"]["ndcg@10"], measures["new_contract_reembedded_ndcg"]
    one_side = entries["pooling"]["ndcg@10"]["CLS queries, mean documents"]
    assert set(ndcg) == {
        "LangChain index() after the change: all skipped",
        "Haystack DocumentWriter(SKIP) after the change",
        "LlamaIndex IngestionPipeline after the change",
    }
    for value in ndcg.values():
        assert value < own < right
        assert value == pytest.approx(one_side, abs=0.01)
    assert ndcg["Haystack DocumentWriter(SKIP) after the change"] == pytest.approx(
        one_side, abs=1e-3
    )
    # LlamaIndex's IngestionPipeline embeds nothing under the new model; ctxemb's, whose docstore
    # keeps a namespace per contract, embeds every document again and scores as the new contract.
    llama = measures["llamaindex_ingestion"]
    assert llama["stock_nodes_embedded_before_and_after"] == [DOCS, 0]
    assert ndcg["LlamaIndex IngestionPipeline after the change"] == pytest.approx(
        one_side, abs=1e-4
    )
    assert llama["contract_pipeline_nodes_embedded_before_and_after"] == [DOCS, DOCS]
    assert llama["contract_pipeline_ndcg"] == pytest.approx(own, abs=1e-4)


def test_an_upgrade_through_ctxemb_reembeds_every_document(gallery) -> None:
    measures = _entries(gallery[0])["dedup"]["measures"]
    plan = measures["plan_upgrade"]
    assert plan["documents_to_reembed"] == plan["index_holds"] == DOCS
    assert plan["shadow"].startswith("scifact-live-")
    upgrade = measures["upgrade_slice"]
    assert upgrade["backfill_written"] == upgrade["documents"] > 0
    # Run again, the backfill finds every text digest in the shadow: nothing to embed.
    assert upgrade["backfill_again_written"] == 0
    assert upgrade["backfill_again_unchanged"] == upgrade["documents"]
    # LangChain's own index() re-adds everything once its namespace names the contract.
    fresh = measures["langchain_namespace_per_contract"]
    assert fresh["num_added"] == upgrade["documents"] and fresh["num_skipped"] == 0
    assert fresh["namespace"].startswith("chroma/lc-dedup/")


def test_a_query_prefix_is_refused_as_a_query_side_change(gallery) -> None:
    tiny, minilm = _entries(gallery[0])["prefix"]["refusals"]
    # The tiny E5-style index was written for "query: " queries; MiniLM's for bare ones.
    assert tiny["kind"] == minilm["kind"] == "query_only"
    assert tiny["detail"] == ["query_prefix: index='query: ', caller=''"]
    assert minilm["detail"] == ["query_prefix: index='', caller='query: '"]


def test_another_encoder_is_refused_on_write_and_caught_when_written_around(gallery) -> None:
    opened, around = _entries(gallery[0])["encoders"]["refusals"]
    assert opened["error"] == "ContractMismatchError"
    assert {"model", "weights"} <= set(opened["fields"]) and opened["kind"] == "reembed"
    assert around["error"] == "ForeignVectorsError"
    assert "foreign-0" in around["message"]


def test_a_pooled_vector_is_refused_where_token_vectors_belong(gallery) -> None:
    entry = _entries(gallery[0])["unit"]
    for refusal in entry["refusals"]:
        assert refusal["error"] == "InvalidInputError"
        assert "must be a 2-D (tokens, dim) array, got shape (384,)" in refusal["message"]


def test_the_chart_and_the_json_are_written(gallery) -> None:
    import matplotlib.image

    result, out, figures = gallery
    image = matplotlib.image.imread(out)
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 600
    assert json.loads(figures.read_text(encoding="utf-8")) == json.loads(json.dumps(result))


def test_docs_keeps_every_judged_document(example, data_dir: Path) -> None:
    data = example.load_scifact(data_dir / "scifact", 10)
    judged = {d for judged in data.qrels.values() for d in judged}
    assert set(data.ids) == judged  # fewer than the judged ones: all judged, nothing else
    assert len(example.load_scifact(data_dir / "scifact", 600).ids) == 600
