"""Pipelines saved before the components were refactored still load, as they were saved.

A saved Haystack pipeline names each component by its class path (``to_dict()["type"]``, e.g.
``ctxemb_haystack._embedders.ContractDocumentEmbedder``) and its init parameters by the names
``to_dict`` wrote. Both are a promise to every YAML file already on disk: a component may move
its code, never its path nor the parameters it reads back. The dict below is what the components
wrote at ``b811049`` (the init parameters of every public component, both embedders with and
without a server, a ranker with a threshold), with the contract filled in at run time.
"""

from __future__ import annotations

import copy
import json

import pytest
from haystack import Pipeline
from haystack.core.serialization import generate_qualified_class_name
from haystack.document_stores.in_memory import InMemoryDocumentStore

import ctxemb_haystack
from ctxemb_core import Embedder
from ctxemb_core.rerank import rerank_contract_for

#: Every public component's class path, as pipelines saved so far record it.
TYPES = {
    "ContractDocumentEmbedder": "ctxemb_haystack._embedders.ContractDocumentEmbedder",
    "ContractTextEmbedder": "ctxemb_haystack._embedders.ContractTextEmbedder",
    "ContractDocumentWriter": "ctxemb_haystack._components.ContractDocumentWriter",
    "ContractRetriever": "ctxemb_haystack._components.ContractRetriever",
    "ContractCrossEncoderRanker": "ctxemb_haystack._rankers.ContractCrossEncoderRanker",
    "ContractLateInteractionRanker": "ctxemb_haystack._rankers.ContractLateInteractionRanker",
    "ContractFusionJoiner": "ctxemb_haystack._fusion.ContractFusionJoiner",
    "ContractLexicalRetriever": "ctxemb_haystack._hybrid.ContractLexicalRetriever",
}


def test_every_component_keeps_the_class_path_saved_pipelines_name():
    assert set(TYPES) <= set(ctxemb_haystack.__all__)
    for name, path in TYPES.items():
        assert generate_qualified_class_name(getattr(ctxemb_haystack, name)) == path


def saved(contract, store) -> dict:
    """A pipeline dict as the components wrote it at b811049 (keys and values as written)."""
    late = rerank_contract_for(contract)
    minilm_path = Embedder.config_for(contract)["path_hint"]  # where the model folder is here
    return {
        "metadata": {},
        "max_runs_per_component": 100,
        "connection_type_validation": True,
        "connections": [],
        "components": {
            "embedder": {
                "type": "ctxemb_haystack._embedders.ContractDocumentEmbedder",
                "init_parameters": {
                    "contract": contract.to_dict(),
                    "path": minilm_path,
                    "backend": "auto",
                    "device": "cpu",
                    "batch_size": 64,
                    "token_budget": 2048,
                    "progress_bar": True,
                    "cache": False,
                    "meta_fields_to_embed": ["title"],
                    "embedding_separator": "\n",
                },
            },
            "text": {
                "type": "ctxemb_haystack._embedders.ContractTextEmbedder",
                "init_parameters": {
                    "contract": contract.to_dict(),
                    "path": None,
                    "backend": "auto",
                    "device": "cpu",
                    "batch_size": 8,
                    "token_budget": 2048,
                    "progress_bar": False,
                    "cache": False,
                    "url": "http://127.0.0.1:9",
                    "api": "openai",
                    "api_key_env": "CTXEMB_TEST_KEY",
                    "served_model": "m",
                },
            },
            "writer": {
                "type": "ctxemb_haystack._components.ContractDocumentWriter",
                "init_parameters": {
                    "document_store": store.to_dict(),
                    "policy": "OVERWRITE",
                    "sample": 16,
                },
            },
            "retriever": {
                "type": "ctxemb_haystack._components.ContractRetriever",
                "init_parameters": {
                    "retriever": {
                        "type": "haystack.components.retrievers.in_memory.embedding_retriever."
                        "InMemoryEmbeddingRetriever",
                        "init_parameters": {
                            "document_store": store.to_dict(),
                            "filters": None,
                            "top_k": 10,
                            "scale_score": False,
                            "return_embedding": False,
                            "filter_policy": "replace",
                        },
                    },
                    "sample": 4,
                },
            },
            "ranker": {
                "type": "ctxemb_haystack._rankers.ContractLateInteractionRanker",
                "init_parameters": {
                    "contract": late.to_dict(),
                    "top_k": 3,
                    "score_threshold": {"value": 0.5, "contract": late.to_dict()},
                    "meta_fields_to_embed": [],
                    "embedding_separator": "\n",
                    "path": minilm_path,
                    "backend": "auto",
                    "device": "cpu",
                    "batch_size": 32,
                    "token_budget": 4096,
                    "progress_bar": False,
                },
            },
            "joiner": {
                "type": "ctxemb_haystack._fusion.ContractFusionJoiner",
                "init_parameters": {"fusion": None, "top_k": 5},
            },
        },
    }


@pytest.fixture(scope="module")
def old(minilm_contract) -> dict:
    return saved(minilm_contract, InMemoryDocumentStore())


def test_a_pipeline_saved_before_loads_and_saves_again_as_it_was(old):
    frozen = json.dumps(old, sort_keys=True)
    pipeline = Pipeline.from_dict(copy.deepcopy(old))
    assert json.dumps(old, sort_keys=True) == frozen
    for name, data in old["components"].items():
        component = pipeline.get_component(name)
        assert generate_qualified_class_name(type(component)) == data["type"]
        again = component.to_dict()
        assert again["type"] == data["type"]
        if name == "retriever":  # Haystack's own retriever may add parameters of its own
            continue
        assert again["init_parameters"] == data["init_parameters"], name
    # Each came back as it was configured (nothing loaded: pipelines load YAML cheaply).
    text, ranker = pipeline.get_component("text"), pipeline.get_component("ranker")
    assert text.lazy.config["remote"]["served_model"] == "m" and text.embedder is None
    assert ranker.top_k == 3 and ranker.reranker is None
    assert ranker.score_threshold.value == 0.5


def test_a_pipeline_saved_before_loads_from_its_yaml(old):
    pipeline = Pipeline.from_dict(copy.deepcopy(old))
    again = Pipeline.loads(pipeline.dumps())
    assert again.to_dict() == pipeline.to_dict()
