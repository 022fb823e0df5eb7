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


# -- the int8 recipe that keeps quality (int8-dynamic-pc-v1) ------------------------------------

#: The digest of every recipe as it shipped. A recipe's vectors are a function of the recipe, so
#: one is never edited in place: a changed recipe is a new contract value (a new version), and
#: an index stamped under the old value keeps being served by the old recipe.
SHIPPED_RECIPES = {
    "int8-dynamic": "424ec561d17fab6e692ff5bb5fcbaf8b61dad8b5967c1355672907aed810f179",
    "int8-dynamic-pc-v1": "6d1d2c90df5b45111553d2e9c30e3d71bf9da69eb3e1588f108803664c14c419",
}
NEW = "int8-dynamic-pc-v1"


def test_every_quantization_value_names_one_pinned_recipe():
    from ctxemb_core.backends.onnx import EXPORT_FORMAT, QUANTIZATION_RECIPES, recipe_digest
    from ctxemb_core.contract import Quantization

    assert set(QUANTIZATION_RECIPES) == {q.value for q in Quantization} == set(SHIPPED_RECIPES)
    for value, digest in SHIPPED_RECIPES.items():
        assert recipe_digest(value) == digest, f"{value}'s recipe changed: add a new version"
    # A versioned recipe names the export it was measured on.
    assert QUANTIZATION_RECIPES[NEW]["export_format"] == EXPORT_FORMAT


@pytest.fixture(scope="module")
def int8_pc():
    return Embedder(contract_for(MINILM, quantization=NEW))


@pytest.fixture(scope="module")
def scifact_docs():
    from conftest import DATA

    from ctxemb_core.eval import document_text, load_beir

    folder = DATA / "scifact"
    if not folder.is_dir():
        pytest.skip(f"{folder} is not there")
    corpus = load_beir(folder, "test").corpus
    return [document_text(corpus[d]) for d in list(corpus)[:96]]


@pytest.mark.heavy
def test_the_new_recipe_keeps_the_float_vectors(int8_pc, minilm, scifact_docs, minilm_contract):
    import warnings

    from ctxemb_core.errors import TruncationWarning

    assert int8_pc.backend == "onnx"
    assert minilm_contract.diff(int8_pc.contract).fields == ("quantization",)
    assert f"weights={NEW}" in int8_pc.contract.describe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        float_vectors = minilm.embed_documents(scifact_docs)
        cos = (int8_pc.embed_documents(scifact_docs) * float_vectors).sum(1)
        old = Embedder(contract_for(MINILM, quantization="int8-dynamic"))
        cos_old = (old.embed_documents(scifact_docs) * float_vectors).sum(1)
    # The bar is a median of 0.99; the first recipe stays far below it.
    assert np.median(cos) >= 0.99 and cos.min() >= 0.98
    assert np.median(cos_old) < 0.96
    assert cos.max() < 1.0 - 1e-6  # still measurably another network


def test_the_new_recipe_gives_vectors_that_do_not_depend_on_their_batch(int8_pc):
    texts = [*TEXTS, "a much longer text " * 20, "x"]
    together = int8_pc.embed_documents(texts)
    alone = np.stack([int8_pc.embed_documents([t])[0] for t in texts])
    assert np.array_equal(together, alone)
    # The first recipe takes its activation scales from the whole batch: the same text moves.
    dynamic = Embedder(contract_for(MINILM, quantization="int8-dynamic"))
    together = dynamic.embed_documents(texts)
    alone = np.stack([dynamic.embed_documents([t])[0] for t in texts])
    assert np.abs(together - alone).max() > 1e-4


def test_int8_recipes_are_contracts_of_their_own(int8_pc, int8_weights, minilm):
    stamp = IndexStamp.from_embedder(int8_pc)
    assert stamp.verify(int8_pc).min_cosine > 0.99999
    for other in (Embedder(int8_weights), minilm):
        with pytest.raises(ContractMismatchError) as info:
            stamp.verify(other)
        assert info.value.fields == ("quantization",)
    # Had the first recipe's twin claimed the new value, the canary would have caught it.
    fresh = IndexStamp.from_embedder(Embedder(int8_weights)).canary
    assert ((stamp.canary * fresh).sum(axis=1)).min() < 0.999


def test_a_recipe_refuses_an_export_of_another_format(int8_pc, monkeypatch):
    import copy

    from ctxemb_core.backends import onnx

    model_file = onnx.export_dir(int8_pc.contract.weights) / "model.onnx"
    recipes = copy.deepcopy(onnx.QUANTIZATION_RECIPES)
    recipes[NEW]["export_format"] = onnx.EXPORT_FORMAT - 1
    monkeypatch.setitem(onnx.QUANTIZATION_RECIPES, NEW, recipes[NEW])
    with pytest.raises(UnsupportedModelError, match="later version of the recipe"):
        onnx._quantized(model_file, NEW)


def test_the_new_recipe_exports_and_serves_the_same_vectors(tmp_path):
    from tiny_models import build_bert

    from ctxemb_core.export import export_model

    folder = build_bert(tmp_path / "bert")
    contract = contract_for(folder, pooling="mean", quantization=NEW)
    served = Embedder(contract, path=folder)
    export = export_model(contract, tmp_path / "export")
    exported = Embedder.from_export(export)
    texts = list(TEXTS)
    assert np.allclose(exported.embed_documents(texts), served.embed_documents(texts), atol=1e-6)
    # Served from the export, too, a text is run alone: its vector does not move with its batch.
    alone = np.stack([exported.embed_documents([t])[0] for t in texts])
    assert np.array_equal(alone, exported.embed_documents(texts))
    IndexStamp.from_embedder(served).verify(exported)


def test_layer_mixing_runs_per_text_on_the_new_recipe(tmp_path):
    from tiny_models import build_bert

    folder = build_bert(tmp_path / "bert", layers=3)
    contract = contract_for(folder, pooling="mean", quantization=NEW, layers="-2,-1")
    emb = Embedder(contract, path=folder, backend="onnx")
    texts = list(TEXTS[:3])
    alone = np.stack([emb.embed_documents([t])[0] for t in texts])
    assert np.array_equal(alone, emb.embed_documents(texts))
