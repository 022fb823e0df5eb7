"""The contract: canonical JSON, fingerprint, round trips, diffs and validation."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from ctxemb_core import DiffKind, EmbeddingContract, Pooling, Precision
from ctxemb_core.errors import DataFormatError, InvalidContractError

DIGEST = "sha256:" + "ab" * 32
OTHER_DIGEST = "sha256:" + "cd" * 32


def make(**changes) -> EmbeddingContract:
    base = {"model": "acme/enc", "weights": DIGEST, "pooling": "mean", "dimension": 384}
    return EmbeddingContract(**{**base, **changes})


def test_canonical_json_is_sorted_compact_and_fingerprinted():
    c = make()
    text = c.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    # Fields added later (layers, include_prompt) are left out at their defaults, so every
    # fingerprint made before them stays what it was.
    later = {"layers", "include_prompt"}
    assert set(json.loads(text)) == {f.name for f in dataclasses.fields(EmbeddingContract)} - later
    assert len(c.fingerprint) == 64 and int(c.fingerprint, 16) >= 0
    assert make().fingerprint == c.fingerprint


def test_round_trips_through_dict_and_json():
    c = make(query_prefix="query: ", document_prefix="passage: ", truncate_dim=128)
    assert EmbeddingContract.from_dict(c.to_dict()) == c
    again = EmbeddingContract.from_json(c.to_json())
    assert again == c and again.fingerprint == c.fingerprint
    assert again.pooling is Pooling.MEAN and again.precision is Precision.FLOAT32


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model", "acme/other"),
        ("weights", OTHER_DIGEST),
        ("pooling", "cls"),
        ("dimension", 768),
        ("query_prefix", "query: "),
        ("document_prefix", "passage: "),
        ("normalize", False),
        ("truncate_dim", 256),
        ("max_tokens", 128),
        ("precision", "int8"),
    ],
)
def test_every_field_changes_the_fingerprint_and_the_diff_names_it(field, value):
    a = make()
    b = a.with_(**{field: value})
    assert b.fingerprint != a.fingerprint
    d = a.diff(b)
    assert d.fields == (field,)
    assert d.changes[0].index == a.to_dict()[field]
    assert d.changes[0].caller == b.to_dict()[field]
    expected = {"query_prefix": DiffKind.QUERY_ONLY, "model": DiffKind.LABEL}
    assert d.kind is expected.get(field, DiffKind.REEMBED)


def test_identical_diff_and_query_only_classification():
    a = make()
    assert a.diff(make()).kind is DiffKind.IDENTICAL and not a.diff(make())
    pair = a.with_(query_model="acme/q", query_weights=OTHER_DIGEST)
    assert a.diff(pair).kind is DiffKind.QUERY_ONLY
    both = a.with_(query_prefix="q: ", pooling="cls")
    assert a.diff(both).kind is DiffKind.REEMBED
    assert a.diff(both).fields == ("pooling", "query_prefix")


def test_a_name_over_the_same_weights_is_a_label_difference_never_a_reembed():
    a = make()
    renamed = a.with_(model="acme/copy")
    assert a.diff(renamed).kind is DiffKind.LABEL and a.diff(renamed).fields == ("model",)
    assert str(a.diff(renamed)).startswith("label: model: ")
    pair = a.with_(query_model="acme/q", query_weights=OTHER_DIGEST)
    assert pair.diff(pair.with_(query_model="acme/q-copy")).kind is DiffKind.LABEL
    assert pair.diff(pair.with_(model="x", query_model="y")).kind is DiffKind.LABEL
    # A label with a query-side change is query-side; with new weights it is a re-embed.
    assert a.diff(renamed.with_(query_prefix="q: ")).kind is DiffKind.QUERY_ONLY
    assert a.diff(renamed.with_(weights=OTHER_DIGEST)).kind is DiffKind.REEMBED
    assert a.diff(a.with_(weights=OTHER_DIGEST)).kind is DiffKind.REEMBED


def test_with_returns_a_validated_copy():
    a = make()
    b = a.with_(pooling=Pooling.CLS)
    assert a.pooling is Pooling.MEAN and b.pooling is Pooling.CLS
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.pooling = Pooling.CLS  # type: ignore[misc]
    with pytest.raises(InvalidContractError, match="unknown contract fields"):
        a.with_(poolin="cls")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pooling": "average"}, "valid values are 'cls', 'mean', 'max', 'last_token'"),
        ({"precision": "float64"}, "valid values are 'float32'"),
        ({"truncate_dim": 512}, "larger than the model's dimension 384"),
        ({"truncate_dim": 0}, "positive integer"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"max_tokens": -5}, "max_tokens must be a positive integer"),
        ({"dimension": True}, "dimension must be a positive integer"),
        ({"weights": "md5:abc"}, "sha256"),
        ({"model": ""}, "model must be a non-empty string"),
        ({"normalize": "yes"}, "normalize must be True or False"),
        ({"query_prefix": None}, "query_prefix must be a string"),
        ({"query_model": "acme/q"}, "go together"),
        ({"precision": "binary", "truncate_dim": 100}, "multiple of 8"),
        ({"schema": 99}, "schema"),
    ],
)
def test_invalid_contracts_are_refused_with_a_readable_error(changes, message):
    with pytest.raises(InvalidContractError, match=message):
        make(**changes)


def test_contract_json_with_missing_or_unknown_fields_is_refused():
    data = make().to_dict()
    del data["pooling"]
    with pytest.raises(DataFormatError, match=r"missing fields \['pooling'\]"):
        EmbeddingContract.from_dict(data)
    data = {**make().to_dict(), "colour": "blue"}
    with pytest.raises(DataFormatError, match=r"unknown fields \['colour'\]"):
        EmbeddingContract.from_dict(data)
    with pytest.raises(DataFormatError, match="cannot be parsed"):
        EmbeddingContract.from_json("{not json")
    with pytest.raises(DataFormatError, match="JSON object"):
        EmbeddingContract.from_json("[1, 2]")
    with pytest.raises(InvalidContractError):
        EmbeddingContract.from_json(json.dumps({**make().to_dict(), "pooling": "avg"}))


def test_fingerprint_is_stable_across_processes(minilm_contract):
    code = (
        "from ctxemb_core import contract_for;"
        "print(contract_for('sentence-transformers/all-MiniLM-L6-v2').fingerprint)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == minilm_contract.fingerprint


def test_prefix_by_role_and_output_dim():
    c = make(query_prefix="query: ", document_prefix="passage: ", truncate_dim=64)
    assert c.prefix("query") == "query: " and c.prefix("document") == "passage: "
    assert c.output_dim == 64 and make().output_dim == 384
    with pytest.raises(InvalidContractError, match="valid values are 'query', 'document'"):
        c.prefix("passage")
