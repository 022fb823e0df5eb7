"""The reranker contract: validation per regime, fingerprints, diffs, thresholds, ordering."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from ctxemb_core.contract import DiffKind
from ctxemb_core.errors import (
    DataFormatError,
    InvalidContractError,
    InvalidInputError,
    RerankerMismatchError,
    StampError,
)
from ctxemb_core.rerank import (
    Activation,
    PairFormat,
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    SkipTokens,
)
from ctxemb_core.rerank._base import rank, resolve_threshold

DIGEST = "sha256:" + "ab" * 32


def cross(**changes):
    fields: dict = dict(
        kind="cross_encoder",
        model="acme/cross",
        weights=DIGEST,
        max_tokens=512,
        pair_format="tokenizer",
        activation="sigmoid",
    )
    fields.update(changes)
    return RerankerContract(**fields)


def late(encoder, **changes):
    fields: dict = dict(
        kind="late_interaction",
        model=encoder.model,
        weights=encoder.weights,
        max_tokens=encoder.max_tokens,
        encoder=encoder,
        skip=("special", "marker"),
    )
    fields.update(changes)
    return RerankerContract(**fields)


def test_a_cross_encoder_contract_is_coerced_and_fingerprinted():
    c = cross()
    assert c.kind is RerankKind.CROSS_ENCODER
    assert c.activation is Activation.SIGMOID and c.pair_format is PairFormat.TOKENIZER
    assert len(c.fingerprint) == 64
    assert RerankerContract.from_json(c.to_json()) == c
    assert RerankerContract.from_json(c.to_json()).fingerprint == c.fingerprint
    assert "activation=sigmoid" in c.describe()


@pytest.mark.parametrize(
    "change",
    [
        {"activation": "none"},
        {"max_tokens": 256},
        {"pair_format": "template", "template": "Q: {query} D: {document}"},
        {"query_prefix": "query: "},
        {"document_prefix": "passage: "},
        {"model": "acme/other"},
        {"weights": "sha256:" + "cd" * 32},
    ],
)
def test_every_field_changes_the_fingerprint(change):
    a = cross()
    b = a.with_(**change)
    assert a.fingerprint != b.fingerprint
    assert set(a.diff(b).fields) == set(change)


def test_the_diff_classifies_query_side_changes(minilm_contract):
    a = late(minilm_contract)
    assert a.diff(a.with_(query_length=32)).kind is DiffKind.QUERY_ONLY
    assert a.diff(a.with_(token_normalize=False)).kind is DiffKind.REEMBED
    assert a.diff(a).kind is DiffKind.IDENTICAL
    assert cross().diff(cross(activation="none")).kind is DiffKind.REEMBED


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"activation": None}, "activation"),
        ({"activation": "tanh"}, "valid values are"),
        ({"pair_format": "zip"}, "valid values are"),
        ({"pair_format": "template"}, "template must be"),
        ({"pair_format": "template", "template": "{query} only"}, "{document}"),
        ({"pair_format": "template", "template": "{query}{query}{document}"}, "exactly once"),
        ({"template": "{query} {document}"}, "only used with"),
        ({"activation": "softmax"}, "softmax over one label"),
        ({"label": 0}, "only set for a network of several"),
        ({"num_labels": 3}, "needs label="),
        ({"num_labels": 3, "label": 3}, "out of range"),
        ({"num_labels": 3, "label": True}, "needs label="),
        ({"max_tokens": 0}, "positive integer"),
        ({"weights": "md5:x"}, "digest"),
        ({"model": " "}, "non-empty"),
        ({"token_normalize": True}, "does not use"),
        ({"skip": ("special",)}, "does not use"),
        ({"schema": 2}, "schema"),
        ({"kind": "bi_encoder"}, "valid values are"),
    ],
)
def test_invalid_cross_encoder_contracts_are_refused(changes, needle):
    with pytest.raises(InvalidContractError, match=needle.replace("{", r"\{").replace("}", r"\}")):
        cross(**changes)


def test_a_softmax_contract_names_its_label():
    c = cross(num_labels=3, label=2, activation="softmax")
    assert c.label == 2 and c.num_labels == 3


def test_a_late_interaction_contract_takes_its_encoders_identity(minilm_contract):
    c = late(minilm_contract)
    assert c.kind is RerankKind.LATE_INTERACTION
    assert c.token_normalize is True
    assert c.skip == (SkipTokens.MARKER, SkipTokens.SPECIAL)  # sorted, whatever the order given
    back = RerankerContract.from_dict(json.loads(c.to_json()))
    assert back == c and back.encoder == minilm_contract
    with pytest.raises(InvalidContractError, match="its encoder's"):
        late(minilm_contract, max_tokens=128)
    with pytest.raises(InvalidContractError, match="does not use"):
        late(minilm_contract, activation="sigmoid")
    with pytest.raises(InvalidContractError, match="needs encoder="):
        RerankerContract(
            kind="late_interaction",
            model=minilm_contract.model,
            weights=minilm_contract.weights,
            max_tokens=minilm_contract.max_tokens,
        )
    with pytest.raises(InvalidContractError, match="exceeds max_tokens"):
        late(minilm_contract, query_length=10_000)
    with pytest.raises(InvalidContractError, match="valid values are"):
        late(minilm_contract, skip=("stopwords",))
    with pytest.raises(InvalidContractError, match="list of token kinds"):
        late(minilm_contract, skip="special")
    # The encoder is part of the fingerprint: another pooling is another reranker contract.
    other = minilm_contract.with_(pooling="cls")
    assert late(other).fingerprint != c.fingerprint


def test_from_dict_is_strict():
    data = cross().to_dict()
    with pytest.raises(DataFormatError, match="missing fields"):
        RerankerContract.from_dict({k: v for k, v in data.items() if k != "activation"})
    with pytest.raises(DataFormatError, match="unknown fields"):
        RerankerContract.from_dict({**data, "extra": 1})
    with pytest.raises(DataFormatError, match="JSON object"):
        RerankerContract.from_dict([1, 2])
    with pytest.raises(DataFormatError, match="twice"):
        RerankerContract.from_json('{"kind": "cross_encoder", "kind": "late_interaction"}')
    with pytest.raises(DataFormatError, match="cannot be parsed"):
        RerankerContract.from_json("{not json")
    with pytest.raises(InvalidContractError, match="unknown reranker contract fields"):
        cross().with_(pooling="mean")


def test_pair_text_forms_the_pair_as_the_contract_says():
    assert cross().pair_text("q", "d") == ("q", "d")
    assert cross(query_prefix="Q: ", document_prefix="D: ").pair_text("q", "d") == ("Q: q", "D: d")
    t = cross(pair_format="template", template="<{query}|{document}>")
    # A placeholder inside the query is the query's own text, never filled again.
    assert t.pair_text("{document}", "d") == ("<{document}|d>", None)


def test_a_threshold_travels_with_its_contract():
    a, b = cross(), cross(activation="none")
    t = ScoreThreshold(0.5, a)
    assert t.check(a) == 0.5
    with pytest.raises(RerankerMismatchError) as info:
        t.check(b)
    err = info.value
    assert isinstance(err, StampError)
    assert err.fields == ("activation",)
    assert "activation: expected='sigmoid', caller='none'" in str(err)
    assert ScoreThreshold.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    assert resolve_threshold(t.to_dict(), a) == 0.5
    assert resolve_threshold(0.25, b) == 0.25  # a plain number is set under the caller's now
    assert resolve_threshold(None, b) is None
    with pytest.raises(RerankerMismatchError):
        resolve_threshold(t.to_dict(), b)
    for bad in ("0.5", True, float("nan")):
        with pytest.raises((InvalidInputError, InvalidContractError)):
            resolve_threshold(bad, a)
    with pytest.raises(DataFormatError):
        ScoreThreshold.from_dict({"value": 1})
    copy = pickle.loads(pickle.dumps(err))
    assert copy.fields == err.fields and str(copy) == str(err)


def test_rank_orders_by_score_with_ties_in_input_order():
    scores = np.array([0.1, 0.9, 0.5, 0.9, 0.5], dtype=np.float32)
    docs = ["a", "b", "c", "d", "e"]
    r = rank(scores, docs, ["ia", "ib", "ic", "id", "ie"], cross())
    assert r.indices == [1, 3, 2, 4, 0]
    assert r.ids == ["ib", "id", "ic", "ie", "ia"]
    assert list(r.scores) == sorted(scores, reverse=True)
    assert r.fingerprint == cross().fingerprint and r.candidates == 5
    assert rank(scores, docs, None, cross(), top_k=2).indices == [1, 3]
    assert rank(scores, docs, None, cross(), threshold=0.5).indices == [1, 3, 2, 4]
    assert rank(scores, docs, None, cross(), threshold=0.5, top_k=3).indices == [1, 3, 2]
    assert len(rank(np.zeros(0), [], None, cross())) == 0


def test_a_contract_loads_from_its_json_file(tmp_path):
    from ctxemb_core.rerank import load_reranker_contract

    c = cross()
    file = tmp_path / "reranker.json"
    file.write_text(c.to_json(), encoding="utf-8")
    assert load_reranker_contract(file) == c
    assert load_reranker_contract(str(file)) == c
    assert load_reranker_contract(c.to_dict()) == c
    with pytest.raises(DataFormatError, match="cannot read"):
        load_reranker_contract(tmp_path / "missing.json")
    with pytest.raises(DataFormatError, match="got int"):
        load_reranker_contract(3)


def test_as_threshold_keeps_the_contract_a_threshold_was_set_under():
    from ctxemb_core.rerank import as_threshold

    a, b = cross(), cross(activation="none")
    assert as_threshold(None, a) is None
    assert as_threshold(0.3, a) == ScoreThreshold(0.3, a)
    assert as_threshold(ScoreThreshold(0.3, a), a) == ScoreThreshold(0.3, a)
    assert as_threshold(ScoreThreshold(0.3, a).to_dict(), a) == ScoreThreshold(0.3, a)
    with pytest.raises(RerankerMismatchError):
        as_threshold(ScoreThreshold(0.3, a), b)


def test_a_lazy_reranker_loads_on_first_use_and_copies_as_its_recipe(minilm_contract, tmp_path):
    import copy

    from ctxemb_core.rerank import LateInteractionReranker, LazyReranker, Reranker

    contract = late(minilm_contract)
    lazy = LazyReranker(contract, batch_size=4)
    assert not lazy.loaded and lazy.built is None
    assert lazy.config["path_hint"]  # located now: the bundled folder
    assert lazy.config == Reranker.config_for(contract, batch_size=4)
    built = lazy.get()
    assert isinstance(built, LateInteractionReranker) and lazy.get() is built
    assert built.batch_size == 4 and built.fingerprint == contract.fingerprint
    for twin in (pickle.loads(pickle.dumps(lazy)), copy.deepcopy(lazy)):
        assert not twin.loaded and twin.config == lazy.config
    with pytest.raises(InvalidInputError, match="backend"):
        LazyReranker(contract, backend="gpu")
    with pytest.raises(InvalidInputError, match="batch_size"):
        LazyReranker(contract, batch_size=0)
    # A hint whose folder holds other weights (or nothing) is ignored, as the Embedder's is.
    from ctxemb_core.rerank import reranker_from_config

    config = {**lazy.config, "path_hint": str(tmp_path)}
    assert reranker_from_config(config).fingerprint == contract.fingerprint
