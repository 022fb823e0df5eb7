"""SciFact through real Haystack pipelines: the example's figures, held to the reference.

Runs ``examples/haystack_retrieval.py``'s own functions (indexing pipeline into both stores at
once, a query pipeline per store, the refusal of another contract), so the example cannot drift
from what is tested.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

pytest.importorskip("haystack")
pytest.importorskip("haystack_integrations.document_stores.chroma")

from ctxemb_core import Embedder
from ctxemb_core.errors import ContractMismatchError

# SciFact abstracts often exceed the model's 256 tokens: truncated by design, here and on open.
pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "haystack_retrieval.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("haystack_retrieval_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclass looks its own module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


example = _load_example()


@pytest.fixture(scope="module")
def scifact(data_dir):
    return example.load_scifact(data_dir)


@pytest.fixture(scope="module")
def indexed(scifact, minilm_contract, tmp_path_factory):
    """Both stores, indexed by one pipeline run (the corpus embedded once).

    The example's embedders read the run's embedding cache (``cache=True``), the query
    pipelines' too while the module's tests run: the corpus and query vectors the ``ctxemb
    eval`` runs embedded before (tests/conftest.py runs the evaluation-set tests in one worker,
    those first) are read back by fingerprint, role and text, not embedded again; run alone,
    this module embeds them itself.
    """
    with pytest.MonkeyPatch.context() as patch:
        for name in ("ContractDocumentEmbedder", "ContractTextEmbedder"):
            patch.setattr(example, name, functools.partial(getattr(example, name), cache=True))
        with example.open_stores(example.STORES, tmp_path_factory.mktemp("chroma")) as stores:
            written = example.index(minilm_contract, stores, example.to_documents(scifact))
            yield stores, written


@pytest.mark.slow
def test_ndcg_matches_the_chroma_adapter(indexed, scifact, minilm_contract):
    stores, written = indexed
    assert written == {"memory": 5183, "chroma": 5183} and len(scifact.corpus) == 5183
    store = "chroma"
    result = example.evaluate_store(minilm_contract, store, stores[store], scifact)
    assert result.queries == 300
    tolerance = example.TOLERANCE[store]
    assert abs(result.ndcg - example.REFERENCE_NDCG) <= tolerance, (
        f"{store}: nDCG@10 {result.ndcg:.5f}, reference {example.REFERENCE_NDCG} +- {tolerance}"
    )
    assert result.ok


#: The in-memory store's queries checked one by one. Haystack's InMemoryDocumentStore builds an
#: array of every stored embedding for each query (~80 ms on 5,183 documents here): its figure
#: over all 300 queries is ``ctxemb eval --via haystack``'s (tests/eval/test_eval_adapters.py).
MEMORY_QUERIES = 40


@pytest.mark.slow
def test_the_memory_store_pipeline_returns_the_exact_top_10(indexed, scifact, minilm_contract):
    stores, _ = indexed
    store = stores["memory"]
    stored = store.filter_documents()
    ids = [d.id for d in stored]
    vectors = np.array([d.embedding for d in stored], dtype=np.float32)
    queries = dict(list(scifact.queries.items())[:MEMORY_QUERIES])
    pipeline = example.query_pipeline(minilm_contract, store, top_k=10)
    run = example.search(pipeline, queries)
    embedded = Embedder(minilm_contract).embed_queries(list(queries.values()))
    for (qid, hits), query in zip(run.items(), embedded, strict=True):
        scores = vectors @ query
        exact = [ids[i] for i in np.argsort(-scores, kind="stable")[:10]]
        assert list(hits) == exact, qid
        np.testing.assert_allclose(
            list(hits.values()), np.sort(scores)[::-1][:10], rtol=0, atol=1e-5
        )


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "chroma"])
def test_a_query_pipeline_of_another_contract_is_refused(indexed, minilm_contract, store):
    stores, _ = indexed
    err = example.refusal(minilm_contract.with_(pooling="cls"), stores[store], "vitamin D")
    assert isinstance(err, ContractMismatchError)
    assert "pooling" in str(err)
