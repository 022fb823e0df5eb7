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

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

pytest.importorskip("haystack")
pytest.importorskip("haystack_integrations.document_stores.chroma")

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

    The example's document embedder reads the run's embedding cache (``cache=True``): the corpus
    vectors the ``ctxemb eval`` runs embedded before (tests/conftest.py runs the evaluation-set
    tests in one worker, those first) are read back by fingerprint, role and text, not embedded
    again; run alone, this module embeds the corpus itself.
    """
    cached = functools.partial(example.ContractDocumentEmbedder, cache=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(example, "ContractDocumentEmbedder", cached)
        with example.open_stores(example.STORES, tmp_path_factory.mktemp("chroma")) as stores:
            written = example.index(minilm_contract, stores, example.to_documents(scifact))
            yield stores, written


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "chroma"])
def test_ndcg_matches_the_chroma_adapter(indexed, scifact, minilm_contract, store):
    stores, written = indexed
    assert written[store] == len(scifact.corpus) == 5183
    result = example.evaluate_store(minilm_contract, store, stores[store], scifact)
    assert result.queries == 300
    tolerance = example.TOLERANCE[store]
    assert abs(result.ndcg - example.REFERENCE_NDCG) <= tolerance, (
        f"{store}: nDCG@10 {result.ndcg:.5f}, reference {example.REFERENCE_NDCG} +- {tolerance}"
    )
    assert result.ok


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "chroma"])
def test_a_query_pipeline_of_another_contract_is_refused(indexed, minilm_contract, store):
    stores, _ = indexed
    err = example.refusal(minilm_contract.with_(pooling="cls"), stores[store], "vitamin D")
    assert isinstance(err, ContractMismatchError)
    assert "pooling" in str(err)
