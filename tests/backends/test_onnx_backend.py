"""The ONNX Runtime backend: the torch backend's vectors, a cached export, honest errors."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from samples import TEXTS
from tiny_models import build_bert, build_roberta

from ctxemb_core import Embedder, Pooling, contract_for
from ctxemb_core.backends import BACKENDS, Encoder, load_encoder
from ctxemb_core.backends.onnx import OnnxEncoder, export_dir
from ctxemb_core.backends.torch import TorchEncoder
from ctxemb_core.errors import (
    CtxembWarning,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedModelError,
)
from ctxemb_core.stamp import IndexStamp


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return (a * b).sum(axis=1)


def mtime(folder: Path) -> int:
    return (export_dir(_digest(folder)) / "model.onnx").stat().st_mtime_ns


def _digest(folder: Path) -> str:
    from ctxemb_core.resolve import weights_digest

    return weights_digest(folder)


@pytest.fixture(scope="module")
def minilm_onnx(minilm_contract) -> Embedder:
    return Embedder(minilm_contract, backend="onnx")


# -- the vectors -----------------------------------------------------------------------------


def test_onnx_is_a_registered_backend_and_an_encoder(tiny_bert):
    assert "onnx" in BACKENDS
    assert isinstance(load_encoder(tiny_bert, "onnx", "cpu"), Encoder)


@pytest.mark.heavy
def test_bundled_model_reproduces_torch_in_both_roles(minilm_contract):
    # Batches of 8, longest first: the long texts pad each other, not the short ones.
    minilm_onnx = Embedder(minilm_contract, backend="onnx", batch_size=8)
    minilm = Embedder(minilm_contract, backend="torch", batch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long texts are truncated on purpose
        for embed in ("embed_documents", "embed_queries"):
            onnx = getattr(minilm_onnx, embed)(TEXTS)
            torch = getattr(minilm, embed)(TEXTS)
            assert cosines(onnx, torch).min() >= 0.99999
            np.testing.assert_allclose(onnx, torch, atol=2e-5)
    assert minilm_onnx.last_truncated == minilm.last_truncated >= 3


def test_canary_stamped_with_torch_verifies_under_onnx(minilm, minilm_onnx):
    check = IndexStamp.from_embedder(minilm).verify(minilm_onnx)
    assert check.min_cosine >= 0.99999


def test_token_vectors_and_offsets_equal_torch(minilm, minilm_onnx):
    text = "Café prices rose 3.5% in 2024, and the bank raised rates."
    onnx, torch = minilm_onnx.embed_tokens(text), minilm.embed_tokens(text)
    assert onnx.tokens == torch.tokens and onnx.offsets == torch.offsets
    assert cosines(onnx.vectors, torch.vectors).min() >= 0.99999


@pytest.mark.parametrize("pooling", list(Pooling))
def test_every_pooling_over_a_tiny_bert_equals_torch(tiny_bert, pooling):
    contract = contract_for(tiny_bert, pooling=pooling, normalize=pooling is not Pooling.MAX)
    texts = [*TEXTS[:12], "banks " * 200]  # one cut at the tiny model's 128 tokens
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx = Embedder(contract, backend="onnx", batch_size=5).embed_documents(texts)
        torch = Embedder(contract, backend="torch", batch_size=5).embed_documents(texts)
    np.testing.assert_allclose(onnx, torch, rtol=1e-4, atol=1e-5)


def test_a_decoder_exports_too_with_last_token_pooling(tiny_decoder):
    contract = contract_for(tiny_decoder, pooling="last_token")
    texts = ["the cat sat", "a dog", "money in the bank and the river bank", "hello world"]
    onnx = Embedder(contract, backend="onnx", batch_size=4).embed_documents(texts)
    torch = Embedder(contract, backend="torch", batch_size=4).embed_documents(texts)
    np.testing.assert_allclose(onnx, torch, rtol=1e-4, atol=1e-5)


# -- the export cache ------------------------------------------------------------------------


def test_export_is_cached_and_reused_by_a_moved_folder(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=11)
    first = OnnxEncoder(folder)
    stamp = mtime(folder)
    meta = json.loads((first.model_file.parent / "export.json").read_text())
    assert meta["weights"] == _digest(folder) and meta["check_min_cosine"] >= 0.99999
    assert meta["files"] == {
        "model.onnx": hashlib.sha256(first.model_file.read_bytes()).hexdigest()
    }
    assert first.model_file == own_cache / "onnx" / _digest(folder)[7:] / "model.onnx"
    assert not [p for p in first.model_file.parent.iterdir() if p.name.startswith(".")]

    again = OnnxEncoder(folder)
    moved = shutil.copytree(folder, tmp_path / "elsewhere" / "bert")
    elsewhere = OnnxEncoder(moved)
    assert again.model_file == elsewhere.model_file == first.model_file
    assert mtime(folder) == stamp  # neither load exported again
    a = first.encode(["the cat sat"], 32).hidden
    np.testing.assert_array_equal(a, elsewhere.encode(["the cat sat"], 32).hidden)


def test_changed_weights_get_a_new_export(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=12)
    before = OnnxEncoder(folder)
    tensors = load_file(folder / "model.safetensors")
    name = next(k for k in tensors if "word_embeddings" in k)
    tensors[name] = tensors[name] * 1.5
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})

    after = OnnxEncoder(folder)
    assert after.weights != before.weights and after.model_file != before.model_file
    want = TorchEncoder(folder).encode(["the cat sat"], 32).hidden
    got = after.encode(["the cat sat"], 32).hidden
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not np.allclose(before.encode(["the cat sat"], 32).hidden, got, atol=1e-3)


def test_an_export_whose_record_does_not_match_is_rebuilt(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=13)
    model_file = OnnxEncoder(folder).model_file
    record = model_file.parent / "export.json"
    meta = json.loads(record.read_text())
    record.write_text(json.dumps({**meta, "weights": "sha256:" + "0" * 64}))
    model_file.write_bytes(b"half a file")  # what an interrupted writer might have left
    stamp = model_file.stat().st_mtime_ns

    with pytest.warns(CtxembWarning, match="its record names the weights 'sha256:000"):
        rebuilt = OnnxEncoder(folder)
    assert model_file.stat().st_mtime_ns != stamp
    assert json.loads(record.read_text())["weights"] == meta["weights"]
    assert rebuilt.encode(["a cat"], 16).hidden.shape == (1, 4, 32)


def test_loads_racing_in_threads_share_one_export(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=16)
    with ThreadPoolExecutor(3) as pool:
        encoders = list(pool.map(lambda _: OnnxEncoder(folder), range(3)))
    assert len({e.model_file for e in encoders}) == 1
    assert sorted(p.name for p in encoders[0].model_file.parent.iterdir()) == [
        "export.json",
        "model.onnx",
    ]
    outs = [e.encode(["the cat sat"], 32).hidden for e in encoders]
    np.testing.assert_array_equal(outs[0], outs[2])


def test_an_unwritable_cache_only_costs_the_reuse(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("CTXEMB_CACHE_DIR", str(blocker / "cache"))
    folder = build_bert(tmp_path / "bert", seed=14)
    enc = OnnxEncoder(folder)
    assert not enc.model_file.exists()  # a scratch export, loaded and removed
    want = TorchEncoder(folder).encode(["the cat sat"], 32).hidden
    np.testing.assert_allclose(enc.encode(["the cat sat"], 32).hidden, want, atol=1e-5)


# -- errors ----------------------------------------------------------------------------------


def test_missing_onnxruntime_says_what_to_install(tiny_bert, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match="pip install onnxruntime"):
        OnnxEncoder(tiny_bert)
    with pytest.raises(MissingDependencyError, match="pip install onnxruntime"):
        load_encoder(tiny_bert, "onnx", "cpu")


def test_missing_onnx_exporter_says_what_to_install(own_cache, tmp_path, monkeypatch):
    folder = build_bert(tmp_path / "bert", seed=15)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(MissingDependencyError, match=r"onnx .*pip install 'ctxemb\[torch\]'"):
        OnnxEncoder(folder)
    assert not [p for p in export_dir(_digest(folder)).iterdir()]  # no scratch left behind


def test_other_devices_and_bad_threads_are_refused(tiny_bert):
    with pytest.raises(InvalidInputError, match=r"valid devices are \['cpu'\]"):
        OnnxEncoder(tiny_bert, device="cuda")
    with pytest.raises(InvalidInputError, match="threads"):
        OnnxEncoder(tiny_bert, threads=0)


# -- the export recipe -----------------------------------------------------------------------


def _record(encoder: OnnxEncoder) -> dict:
    return json.loads((encoder.model_file.parent / "export.json").read_text())


@pytest.mark.parametrize("build", [build_bert, build_roberta])
def test_bert_family_exports_with_fused_attention(own_cache, tmp_path, build):
    folder = build(tmp_path / "encoder", seed=31)
    encoder = OnnxEncoder(folder)
    record = _record(encoder)
    assert record["attention"] == "eager" and record["rejected"] == []
    assert record["fused"]["Attention"] == 2 and record["fused"]["SkipLayerNormalization"] == 4
    assert record["check_min_cosine"] >= 0.99999
    torch_vectors = TorchEncoder(folder).encode(TEXTS, 48).hidden
    np.testing.assert_allclose(encoder.encode(TEXTS, 48).hidden, torch_vectors, atol=1e-5)


def test_a_decoder_exports_with_eager_attention_unfused(own_cache, tiny_decoder):
    record = _record(OnnxEncoder(tiny_decoder))
    assert record["attention"] == "eager" and record["fused"] == {}
    assert record["check_min_cosine"] >= 0.99999


def _fusion_raises(model_file: Path, config: object) -> dict:
    raise RuntimeError("fusion pattern not recognised")


def _fusion_writes_a_broken_graph(model_file: Path, config: object) -> dict:
    model_file.write_bytes(b"not an onnx graph")
    return {"Attention": 2}


@pytest.mark.parametrize(
    ("fusion", "reason"),
    [(_fusion_raises, "RuntimeError: fusion pattern"), (_fusion_writes_a_broken_graph, "")],
)
def test_a_recipe_that_fails_gives_way_to_the_next(
    own_cache, tmp_path, monkeypatch, fusion, reason
):
    import ctxemb_core.backends.onnx_build as onnx_backend

    monkeypatch.setattr(onnx_backend, "_fuse", fusion)
    folder = build_bert(tmp_path / "bert", seed=32)
    encoder = OnnxEncoder(folder)
    record = _record(encoder)
    assert record["attention"] == "eager" and record["fused"] == {}
    assert len(record["rejected"]) == 1 and record["rejected"][0].startswith("eager + fused: ")
    assert reason in record["rejected"][0]
    torch_vectors = TorchEncoder(folder).encode(TEXTS[:6], 32).hidden
    np.testing.assert_allclose(encoder.encode(TEXTS[:6], 32).hidden, torch_vectors, atol=1e-5)


def test_an_export_no_recipe_reproduces_is_refused_and_not_cached(own_cache, tmp_path, monkeypatch):
    import ctxemb_core.backends.onnx_recipes as onnx_backend

    monkeypatch.setattr(onnx_backend, "CHECK_MIN_COSINE", 1.5)  # no cosine reaches it
    folder = build_bert(tmp_path / "bert", seed=33)
    with pytest.raises(UnsupportedModelError) as caught:
        OnnxEncoder(folder)
    message = str(caught.value)
    for recipe in ("eager + fused:", "eager:", "sdpa:", "backend='torch'"):
        assert recipe in message
    assert not list(export_dir(_digest(folder)).iterdir())  # nothing published, no scratch


def test_without_switchable_attention_the_network_exports_as_is(own_cache, tmp_path, monkeypatch):
    # transformers releases before set_attn_implementation: only the network's own attention.
    from transformers import PreTrainedModel

    monkeypatch.delattr(PreTrainedModel, "set_attn_implementation")
    folder = build_bert(tmp_path / "bert", seed=34)
    encoder = OnnxEncoder(folder)
    record = _record(encoder)
    assert record["attention"] == TorchEncoder(folder).model.config._attn_implementation
    assert record["fused"] == {} and record["rejected"] == []
    torch_vectors = TorchEncoder(folder).encode(TEXTS[:6], 32).hidden
    np.testing.assert_allclose(encoder.encode(TEXTS[:6], 32).hidden, torch_vectors, atol=1e-5)
