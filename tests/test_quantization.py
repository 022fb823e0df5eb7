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


# -- the int8 recipe that keeps quality (int8-static-v1) ----------------------------------------

#: The digest of every recipe as it shipped. A recipe's vectors are a function of the recipe, so
#: one is never edited in place: a changed recipe is a new contract value (a new version), and
#: an index stamped under the old value keeps being served by the old recipe.
SHIPPED_RECIPES = {
    "int8-dynamic": "424ec561d17fab6e692ff5bb5fcbaf8b61dad8b5967c1355672907aed810f179",
    "int8-static-v1": "31a3704e2372d3948a9c58eb176bcfdb5f7efaaf5f00290468f39bfe1d1c9efe",
}


def test_every_quantization_value_names_one_pinned_recipe():
    from ctxemb_core.backends.onnx import EXPORT_FORMAT, QUANTIZATION_RECIPES, recipe_digest
    from ctxemb_core.contract import Quantization

    assert set(QUANTIZATION_RECIPES) == {q.value for q in Quantization} == set(SHIPPED_RECIPES)
    for value, digest in SHIPPED_RECIPES.items():
        assert recipe_digest(value) == digest, f"{value}'s recipe changed: add a new version"
    # A versioned recipe names the export it was measured on.
    assert QUANTIZATION_RECIPES["int8-static-v1"]["export_format"] == EXPORT_FORMAT


@pytest.fixture(scope="module")
def int8_static():
    return Embedder(contract_for(MINILM, quantization="int8-static-v1"))


@pytest.fixture(scope="module")
def scifact_docs():
    from conftest import DATA

    from ctxemb_core.eval import document_text, load_beir

    folder = DATA / "scifact"
    if not folder.is_dir():
        pytest.skip(f"{folder} is not there")
    corpus = load_beir(folder, "test").corpus
    return [document_text(corpus[d]) for d in list(corpus)[:96]]


def test_int8_static_keeps_the_float_vectors(int8_static, minilm, scifact_docs, minilm_contract):
    import warnings

    from ctxemb_core.errors import TruncationWarning

    assert int8_static.backend == "onnx"
    assert minilm_contract.diff(int8_static.contract).fields == ("quantization",)
    assert "weights=int8-static-v1" in int8_static.contract.describe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        cos = (
            int8_static.embed_documents(scifact_docs) * minilm.embed_documents(scifact_docs)
        ).sum(1)
    # The float contract's vectors within the bar (median >= 0.99), with room to spare;
    # the first recipe gave a median of 0.937 on the same texts.
    assert np.median(cos) >= 0.999 and cos.min() >= 0.995
    assert cos.max() < 1.0 - 1e-7  # and still measurably another network


def test_int8_static_vectors_do_not_depend_on_their_batch(int8_static):
    texts = [*TEXTS, "a much longer text " * 20, "x"]
    together = int8_static.embed_documents(texts)
    alone = np.stack([int8_static.embed_documents([t])[0] for t in texts])
    assert np.array_equal(together, alone)
    # The dynamic recipe takes its activation scales from the batch: the same text moves.
    dynamic = Embedder(contract_for(MINILM, quantization="int8-dynamic"))
    together = dynamic.embed_documents(texts)
    alone = np.stack([dynamic.embed_documents([t])[0] for t in texts])
    assert np.abs(together - alone).max() > 1e-4


def test_int8_recipes_are_contracts_of_their_own(int8_static, int8_weights, minilm):
    stamp = IndexStamp.from_embedder(int8_static)
    assert stamp.verify(int8_static).min_cosine > 0.99999
    for other in (Embedder(int8_weights), minilm):
        with pytest.raises(ContractMismatchError) as info:
            stamp.verify(other)
        assert info.value.fields == ("quantization",)
    # Had the dynamic recipe's twin claimed the static value, the canary would have caught it.
    fresh = IndexStamp.from_embedder(Embedder(int8_weights)).canary
    assert ((stamp.canary * fresh).sum(axis=1)).min() < 0.999


def test_a_recipe_refuses_an_export_of_another_format(int8_static, monkeypatch):
    import copy

    from ctxemb_core.backends import onnx

    model_file = onnx.export_dir(int8_static.contract.weights) / "model.onnx"
    tokenizer = int8_static._doc.encoder.tokenizer
    recipes = copy.deepcopy(onnx.QUANTIZATION_RECIPES)
    recipes["int8-static-v1"]["export_format"] = onnx.EXPORT_FORMAT - 1
    monkeypatch.setattr(onnx, "_QUANTIZATION_RECIPES", recipes)
    with pytest.raises(UnsupportedModelError, match="later version of the recipe"):
        onnx._quantized(model_file, "int8-static-v1", tokenizer)


def test_static_calibration_is_the_shipped_texts_or_nothing(int8_static, monkeypatch):
    from ctxemb_core.backends import onnx

    calibration = onnx.QUANTIZATION_RECIPES["int8-static-v1"]["calibration"]
    tokenizer = int8_static._doc.encoder.tokenizer
    batches = onnx.calibration_batches(calibration, tokenizer, ["input_ids", "attention_mask"])
    assert sum(len(b["input_ids"]) for b in batches) == len(onnx.calibration_texts()) == 29
    assert all(len(b["input_ids"]) <= calibration["batch"] for b in batches)
    monkeypatch.setattr(onnx, "calibration_texts", lambda: ["one other text"])
    with pytest.raises(UnsupportedModelError, match="calibration texts have changed"):
        onnx.calibration_batches(calibration, tokenizer, ["input_ids"])


def test_int8_static_on_a_tiny_model_exports_and_serves_the_same_vectors(tmp_path):
    from tiny_models import build_bert

    from ctxemb_core.export import export_model

    folder = build_bert(tmp_path / "bert")
    contract = contract_for(folder, pooling="mean", quantization="int8-static-v1")
    served = Embedder(contract, path=folder)
    export = export_model(contract, tmp_path / "export")
    exported = Embedder.from_export(export)
    texts = list(TEXTS)
    assert np.allclose(exported.embed_documents(texts), served.embed_documents(texts), atol=1e-6)
    IndexStamp.from_embedder(served).verify(exported)
