"""What every framework component builds through core: its model, and the arguments it saves.

Haystack's and LangChain's components take the same keywords (the model's settings and the
contract's options, mixed as their users write them); :mod:`ctxemb_core.components` tells them
apart, checks and defaults them, builds the lazy model and gives back the keywords that build
it again. These tests hold that shared part without any framework.
"""

from __future__ import annotations

import json

import pytest
from conftest import MINILM

from ctxemb_core.components import (
    EMBEDDER_KEYWORDS,
    RERANKER_KEYWORDS,
    ContractComponent,
    component_embedder,
    component_reranker,
    embedder_arguments,
    reranker_arguments,
    reranker_contract,
)
from ctxemb_core.errors import InvalidArgumentsError, InvalidInputError
from ctxemb_core.lazy import LazyEmbedder
from ctxemb_core.rerank import LazyReranker, RerankKind, rerank_contract_for


def test_the_settings_are_the_lazy_models_keywords():
    assert EMBEDDER_KEYWORDS == (
        "path",
        "backend",
        "device",
        "batch_size",
        "token_budget",
        "url",
        "api",
        "api_key_env",
        "served_model",
    )
    assert RERANKER_KEYWORDS == ("path", "backend", "device", "batch_size", "token_budget")


def test_settings_and_contract_options_are_told_apart(minilm_contract):
    keywords = {"batch_size": 8, "truncate_dim": 128, "normalize_embeddings": True}
    lazy = component_embedder(None, MINILM, keywords, component="E", role="document")
    assert isinstance(lazy, LazyEmbedder) and not lazy.loaded
    assert lazy.contract.truncate_dim == 128
    assert lazy.contract == minilm_contract.with_(truncate_dim=128)
    args = embedder_arguments(lazy)
    assert args["batch_size"] == 8 and args["token_budget"] == 2048  # the Embedder's default
    assert "url" not in args
    # The arguments are plain JSON and build the same embedder again.
    again = LazyEmbedder(**json.loads(json.dumps(args)))
    assert again.config == lazy.config


def test_a_server_is_saved_by_its_url_and_the_name_of_its_key(minilm_contract, monkeypatch):
    monkeypatch.setenv("CTXEMB_TEST_KEY", "secret-value")
    keywords = {"url": "http://127.0.0.1:9/", "api": "openai", "api_key_env": "CTXEMB_TEST_KEY"}
    lazy = component_embedder(minilm_contract, None, keywords, component="E")
    args = embedder_arguments(lazy)
    assert args["url"] == "http://127.0.0.1:9" and args["api_key_env"] == "CTXEMB_TEST_KEY"
    assert "served_model" not in args and "secret-value" not in json.dumps(args)
    served = component_embedder(
        minilm_contract, None, {**keywords, "served_model": "m"}, component="E"
    )
    assert embedder_arguments(served)["served_model"] == "m"


def test_bad_settings_and_unknown_keywords_are_refused_before_anything_loads(minilm_contract):
    with pytest.raises(InvalidInputError, match="batch_size"):
        component_embedder(minilm_contract, None, {"batch_size": 0}, component="E")
    with pytest.raises(InvalidArgumentsError, match="E got an unexpected keyword bacth_size"):
        component_embedder(None, MINILM, {"bacth_size": 8}, component="E")
    with pytest.raises(InvalidArgumentsError, match="contract options"):
        component_embedder(minilm_contract, None, {"pooling": "cls"}, component="E")


def test_a_reranker_of_another_regime_is_refused_with_the_component_for_it(minilm_contract):
    late = rerank_contract_for(minilm_contract)
    others = {RerankKind.LATE_INTERACTION: "LateRanker"}
    with pytest.raises(InvalidInputError, match="; use LateRanker for it"):
        reranker_contract(
            late, None, {}, component="CE", kind=RerankKind.CROSS_ENCODER, others=others
        )
    with pytest.raises(InvalidInputError, match="each regime has its own component"):
        reranker_contract(late, None, {}, component="CE", kind=RerankKind.CROSS_ENCODER)
    kind = RerankKind.LATE_INTERACTION
    lazy = component_reranker(late, None, {"device": "cpu"}, component="L", kind=kind)
    assert isinstance(lazy, LazyReranker) and lazy.built is None
    args = reranker_arguments(lazy)
    assert (args["batch_size"], args["token_budget"]) == (32, 4096)  # the reranker's defaults
    assert LazyReranker(**json.loads(json.dumps(args))).config == lazy.config
    with pytest.raises(InvalidInputError, match="token_budget"):
        component_reranker(late, None, {"token_budget": -1}, component="L", kind=kind)


def test_a_component_shows_its_contract(minilm_contract):
    class Shown(ContractComponent):
        def __init__(self) -> None:
            self.contract = minilm_contract

        def _shown(self) -> dict:
            return {"top_n": 3}

    shown = Shown()
    assert shown.fingerprint == minilm_contract.fingerprint
    assert repr(shown) == f"Shown({minilm_contract.describe()}, top_n=3)"
