"""Run settings declared once: one declaration drives config, config_for and from_config.

The Embedder's and the rerankers' ``run_settings`` name the keys their configs write (in
order), the defaults and the checks; a setting added to a declaration appears in all three
without another line.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest

from ctxemb_core import Embedder
from ctxemb_core.errors import DataFormatError, InvalidInputError
from ctxemb_core.lazy import LazyEmbedder
from ctxemb_core.rerank import (
    CrossEncoderReranker,
    LateInteractionReranker,
    LazyReranker,
    Reranker,
    RerankerContract,
    check_settings,
)
from ctxemb_core.rerank._base import CONFIG_KEYS, RERANKER_SETTINGS, check_config
from ctxemb_core.settings import RunSettings, Setting

DIGEST = "sha256:" + "ab" * 32


def _cross() -> RerankerContract:
    return RerankerContract(
        kind="cross_encoder",
        model="acme/cross",
        weights=DIGEST,
        max_tokens=512,
        pair_format="tokenizer",
        activation="sigmoid",
    )


def _defaults(call: Any, names: tuple[str, ...]) -> dict[str, Any]:
    params = inspect.signature(call).parameters
    return {n: params[n].default for n in names}


@pytest.mark.parametrize("owner", [Embedder, LazyEmbedder])
def test_the_embedder_declaration_is_its_constructors_defaults(owner):
    settings = Embedder.run_settings
    assert settings.keys == (
        "contract",
        "path_hint",
        "query_path_hint",
        "backend",
        "device",
        "batch_size",
        "token_budget",
    )
    assert _defaults(owner.__init__, settings.names) == settings.defaults()


@pytest.mark.parametrize(
    "owner", [Reranker, CrossEncoderReranker, LateInteractionReranker, LazyReranker]
)
def test_the_reranker_declaration_is_every_rerankers_defaults(owner):
    assert RERANKER_SETTINGS.keys == CONFIG_KEYS
    assert CONFIG_KEYS == (
        "contract",
        "path_hint",
        "backend",
        "device",
        "batch_size",
        "token_budget",
    )
    assert _defaults(owner.__init__, RERANKER_SETTINGS.names) == RERANKER_SETTINGS.defaults()
    assert getattr(owner, "run_settings", RERANKER_SETTINGS) is RERANKER_SETTINGS


def test_config_for_writes_the_declared_keys_in_order(minilm_contract):
    config = Embedder.config_for(minilm_contract, batch_size=8)
    assert tuple(config) == Embedder.run_settings.keys
    assert config["batch_size"] == 8 and config["token_budget"] == 2048
    reranker = Reranker.config_for(_cross(), device="cuda:0")
    assert tuple(reranker) == CONFIG_KEYS
    assert reranker["device"] == "cuda:0" and reranker["batch_size"] == 32


def test_config_for_refuses_a_name_that_is_not_a_setting(minilm_contract):
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Embedder.config_for(minilm_contract, colour="blue")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Reranker.config_for(_cross(), colour="blue")


class _Tuned(Embedder):
    """An Embedder that runs with one more setting: declared once, nowhere else."""

    run_settings = Embedder.run_settings.with_(Setting("colour", "blue", lambda v, n: v))

    def __init__(self, contract: Any, *, colour: str = "blue", **options: Any) -> None:
        super().__init__(contract, **options)
        self.colour = colour


def test_a_setting_added_to_the_declaration_appears_in_config_config_for_and_from_config(
    minilm, minilm_contract
):
    assert _Tuned.config_for(minilm_contract)["colour"] == "blue"
    assert list(_Tuned.config_for(minilm_contract))[-1] == "colour"
    tuned = _Tuned(minilm_contract, path=minilm.model_path, colour="red", batch_size=5)
    config = json.loads(json.dumps(tuned.config()))
    assert config["colour"] == "red" and config["batch_size"] == 5
    again = _Tuned.from_config(config)
    assert again.colour == "red" and again.batch_size == 5
    assert again.config() == tuned.config()
    # The plain Embedder's declaration is untouched and refuses the key, naming its own keys.
    with pytest.raises(DataFormatError, match=r"unknown Embedder config keys \['colour'\]"):
        Embedder.from_config(config)


def test_a_setting_added_to_the_reranker_declaration_reaches_its_config():
    class Tuned(Reranker):
        run_settings = RERANKER_SETTINGS.with_(Setting("colour", "blue", lambda v, n: v))

        def __init__(self, contract: Any, *, colour: str = "blue", **options: Any) -> None:
            self.colour = colour
            super().__init__(contract, **options)

    tuned = Tuned(_cross(), colour="red", path="/nowhere")
    config = tuned.config()
    assert list(config) == [*CONFIG_KEYS, "colour"] and config["colour"] == "red"
    assert Tuned.config_for(_cross(), path="/x")["colour"] == "blue"


def test_the_declared_checks_keep_their_messages(minilm_contract):
    with pytest.raises(
        InvalidInputError, match=r"^backend must be 'auto', 'onnx', 'torch' or 'static', got 'gpu'$"
    ):
        LazyEmbedder(minilm_contract, backend="gpu")
    with pytest.raises(InvalidInputError, match=r"^device must be a device name such as 'cpu'"):
        LazyEmbedder(minilm_contract, device="")
    with pytest.raises(
        InvalidInputError, match=r"^token_budget must be a positive integer, got 0$"
    ):
        Embedder(minilm_contract, token_budget=0)
    with pytest.raises(
        InvalidInputError,
        match=r"^backend='gpu' is not known; valid backends are \['auto', 'onnx', 'torch'\]$",
    ):
        Reranker.config_for(_cross(), backend="gpu")
    with pytest.raises(
        InvalidInputError, match=r"^batch_size must be a positive integer, got True$"
    ):
        check_settings("auto", "cpu", True, 1)
    with pytest.raises(InvalidInputError, match=r"^device must be a device name such as 'cpu'"):
        Reranker(_cross(), device=3)  # type: ignore[arg-type]


def test_config_reading_errors_keep_their_messages():
    with pytest.raises(
        DataFormatError, match=r"^an Embedder config is a mapping with a 'contract'"
    ):
        Embedder.from_config([])  # type: ignore[arg-type]
    with pytest.raises(DataFormatError, match=r"^a reranker config is a mapping with a 'contract'"):
        check_config({"contract": 1})
    config = {"contract": _cross().to_dict(), "speed": 1}
    with pytest.raises(
        DataFormatError,
        match=r"^unknown reranker config keys \['speed'\]; the keys are \['backend', 'batch_size'",
    ):
        check_config(config)


def test_run_settings_read_keeps_only_what_a_config_holds():
    settings = RunSettings(
        "thing",
        "a thing config",
        "Thing.config()",
        ("contract",),
        (
            Setting("a", 1),
            Setting("b", 2),
        ),
    )
    assert settings.read({"contract": {}, "b": 5}) == {"b": 5}
    assert settings.complete({"a": 0}, "Thing.config_for") == {"a": 0, "b": 2}
