"""Contracts are validated completely: exact types, sensible bounds, full-pattern digests,
bounded JSON, and no user value silently replaced by a default."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import MINILM
from tiny_models import build_bert

from ctxemb_core import EmbeddingContract, Pooling, contract_for
from ctxemb_core.contract import MAX_CONTRACT_JSON
from ctxemb_core.errors import (
    CtxembError,
    DataFormatError,
    InvalidContractError,
    InvalidInputError,
)

DIGEST = "sha256:" + "ab" * 32


def make(**changes) -> EmbeddingContract:
    base = {"model": "acme/enc", "weights": DIGEST, "pooling": "mean", "dimension": 384}
    return EmbeddingContract(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dimension": 384.0}, "dimension must be a positive integer"),
        ({"dimension": True}, "dimension must be a positive integer"),
        ({"max_tokens": True}, "max_tokens must be a positive integer"),
        ({"max_tokens": 1.0}, "max_tokens must be a positive integer"),
        ({"max_tokens": "128"}, "max_tokens must be a positive integer"),
        ({"truncate_dim": True}, "truncate_dim must be a positive integer"),
        ({"truncate_dim": 64.0}, "truncate_dim must be a positive integer"),
        ({"truncate_dim": -1}, "truncate_dim must be a positive integer"),
        ({"truncate_dim": 385}, "valid values are 1..384"),
        ({"schema": True}, "schema True is not supported"),
        ({"schema": 1.0}, "schema 1.0 is not supported"),
        ({"schema": "1"}, "schema '1' is not supported"),
        ({"weights": DIGEST + "\n"}, "weights must be a 'sha256:<64 hex digits>'"),
        ({"weights": "\n" + DIGEST}, "weights must be"),
        ({"weights": DIGEST.upper()}, "weights must be"),
        ({"query_model": "acme/q", "query_weights": DIGEST + "\n"}, "query_weights must be"),
        ({"normalize": 1}, "normalize must be True or False"),
        ({"pooling": {"mode": "mean"}}, "pooling=.* is not valid; valid values are"),
        ({"pooling": ["mean"]}, "pooling=.* is not valid"),
        ({"precision": ["float32"]}, "precision=.* is not valid"),
        ({"quantization": {"int8": True}}, "quantization=.* is not valid"),
        ({"pooling": 1}, "pooling=1 is not valid"),
        ({"model": ["acme/enc"]}, "model must be a non-empty string"),
        ({"query_prefix": {"q": 1}}, "query_prefix must be a string"),
    ],
)
def test_values_must_have_the_exact_type_and_a_sensible_range(changes, message):
    with pytest.raises(InvalidContractError, match=message):
        make(**changes)


def test_the_bounds_themselves_are_accepted():
    assert make(truncate_dim=384).output_dim == 384
    assert make(truncate_dim=1, max_tokens=1).output_dim == 1


def test_contract_json_with_wrongly_typed_values_is_refused_as_a_ctxemb_error():
    good = make().to_dict()
    for field, value in [
        ("pooling", {"a": 1}),
        ("precision", [1]),
        ("quantization", {}),
        ("dimension", [384]),
        ("schema", True),
        ("weights", DIGEST + "\n"),
        ("max_tokens", 512.0),
    ]:
        with pytest.raises(InvalidContractError):
            EmbeddingContract.from_json(json.dumps({**good, field: value}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
        (" " * (MAX_CONTRACT_JSON + 1), "is refused"),
        (b"{" + b" " * MAX_CONTRACT_JSON + b"}", "is refused"),
        (b'{"model": "\xff"}', "cannot be parsed"),
        ("1" * 5000, "cannot be parsed"),  # past Python's int digit limit
        (None, "cannot be parsed"),
    ],
)
def test_deep_huge_or_unreadable_contract_json_is_a_data_format_error(text, message):
    with pytest.raises(DataFormatError, match=message):
        EmbeddingContract.from_json(text)


def test_a_stored_contract_one_byte_under_the_bound_is_still_read():
    c = make()
    padded = c.to_json() + " " * (MAX_CONTRACT_JSON - len(c.to_json()))
    assert EmbeddingContract.from_json(padded) == c


# -- contract_for: a user's value is used as given, never replaced ------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be a positive integer, got 0"),
        ({"max_tokens": -1}, "max_tokens must be a positive integer"),
        ({"max_tokens": False}, "max_tokens must be a positive integer, got False"),
        ({"max_tokens": True}, "max_tokens must be a positive integer, got True"),
        ({"max_tokens": 128.0}, "max_tokens must be a positive integer"),
        ({"max_tokens": "128"}, "max_tokens must be a positive integer"),
        ({"max_tokens": 513}, "exceeds the 512 positions"),
        ({"truncate_dim": 0}, "truncate_dim must be a positive integer"),
        ({"truncate_dim": False}, "truncate_dim must be a positive integer"),
        ({"truncate_dim": 385}, "larger than the model's dimension 384"),
        ({"query_prefix": 0}, "query_prefix must be a string"),
        ({"normalize": 0}, "normalize must be True or False"),
        ({"pooling": ""}, "pooling='' is not valid"),
        ({"name": ""}, "name must be a non-empty string"),
        ({"name": 42}, "name must be a non-empty string"),
        ({"family": ["e5"]}, "family=\\['e5'\\] is not known"),
        ({"family": "e6"}, "family='e6' is not known"),
    ],
)
def test_contract_for_never_turns_a_bad_value_into_a_default(minilm_contract, overrides, message):
    with pytest.raises(InvalidContractError, match=message):
        contract_for(MINILM, **overrides)


def test_none_means_not_given_and_keeps_what_the_folder_says(minilm_contract):
    c = contract_for(MINILM, pooling=None, max_tokens=None, truncate_dim=None, name=None)
    assert c == minilm_contract
    assert contract_for(MINILM, max_tokens=1).max_tokens == 1
    assert contract_for(MINILM, max_tokens=512).max_tokens == 512


def test_bad_model_arguments_are_invalid_input():
    for bad in (None, 42, b"folder", ["a"], "", " "):
        with pytest.raises(InvalidInputError):
            contract_for(bad)  # type: ignore[arg-type]


def test_an_explicit_family_wins_over_the_folders_prompts(tiny_st_factory):
    folder = tiny_st_factory(prompts={"query": "q: ", "document": "d: "})
    assert contract_for(folder).query_prefix == "q: "
    e5 = contract_for(folder, family="e5")
    assert (e5.query_prefix, e5.document_prefix) == ("query: ", "passage: ")
    # Explicit prefixes still win over both.
    assert contract_for(folder, family="e5", query_prefix="").query_prefix == ""


def test_max_tokens_is_bounded_by_the_query_encoders_positions_too(tmp_path):
    documents = build_bert(tmp_path / "doc", max_position=128)
    queries = build_bert(tmp_path / "query", max_position=64, seed=4)
    with pytest.raises(InvalidContractError, match="exceeds the 64 positions"):
        contract_for(documents, pooling="cls", query_encoder=queries, max_tokens=100)
    c = contract_for(documents, pooling="cls", query_encoder=queries, max_tokens=64)
    assert c.max_tokens == 64


def test_a_folder_whose_max_seq_length_exceeds_its_positions_says_so(tmp_path, tiny_st_factory):
    folder = tmp_path / "m"
    shutil.copytree(tiny_st_factory(legacy=True, max_seq_length=48), folder)
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    config["max_seq_length"] = 1000
    (folder / "sentence_bert_config.json").write_text(json.dumps(config))
    with pytest.raises(CtxembError, match="max_seq_length=1000 exceeds the 128 positions"):
        contract_for(folder)
    # An explicit limit within the positions resolves it: the caller chose, nothing guessed.
    assert contract_for(folder, max_tokens=100).max_tokens == 100
    assert contract_for(folder, max_tokens=100).pooling is Pooling.MEAN
