"""Lossy variants are contracts of their own: int8 weights, int8 and binary vectors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MINILM

from ctxemb_core import DiffKind, Embedder, IndexStamp, contract_for
from ctxemb_core.errors import ContractMismatchError, InvalidContractError, UnsupportedModelError

TEXTS = [
    "green tea leaves are steamed soon after picking",
    "the moon shows phases as it orbits the earth",
    "protein kinase inhibitors reduce tumour growth in mice",
]


@pytest.fixture(scope="module")
def int8_weights():
    return contract_for(MINILM, quantization="int8-dynamic")


def test_int8_weights_are_another_contract(int8_weights, minilm_contract):
    d = minilm_contract.diff(int8_weights)
    assert d.fields == ("quantization",) and d.kind is DiffKind.REEMBED
    assert "weights=int8-dynamic" in int8_weights.describe()
    with pytest.raises(InvalidContractError, match="valid values are 'int8-dynamic'"):
        contract_for(MINILM, quantization="int4")


def test_int8_weights_run_on_onnx_and_are_close_but_not_the_float_vectors(
    int8_weights, minilm, minilm_contract
):
    quantised = Embedder(int8_weights)
    assert quantised.backend == "onnx"
    cos = (quantised.embed_documents(TEXTS) * minilm.embed_documents(TEXTS)).sum(axis=1)
    assert 0.9 < cos.min() < 0.999  # close in meaning, measurably other vectors
    # The float index refuses it by contract, and its own stamp verifies it.
    with pytest.raises(ContractMismatchError) as info:
        IndexStamp.from_embedder(minilm).verify(quantised)
    assert info.value.fields == ("quantization",)
    assert IndexStamp.from_embedder(quantised).verify(quantised).min_cosine > 0.9999
    # Had it claimed the float contract, the canary would have caught it.
    canary = IndexStamp.from_embedder(minilm).canary
    fresh = IndexStamp.from_embedder(quantised).canary
    rowcos = (canary * fresh).sum(axis=1)
    assert rowcos.min() < 0.9995


def test_int8_weights_refuse_the_torch_backend(int8_weights):
    with pytest.raises(UnsupportedModelError, match="onnx backend"):
        Embedder(int8_weights, backend="torch")


def test_vector_precisions_change_the_fingerprint(minilm_contract):
    for precision in ("float16", "int8", "binary"):
        other = contract_for(MINILM, precision=precision)
        assert minilm_contract.diff(other).fields == ("precision",)
        vectors = Embedder(other).embed_documents(TEXTS)
        assert vectors.shape[0] == len(TEXTS) and np.isfinite(vectors.astype(float)).all()
