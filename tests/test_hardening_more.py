"""A second adversarial pass below the guard: races, edge values and inputs the first pass missed.

Every attack is real: files are replaced on disk at the moment another process could replace
them, contracts are built from the values a hand-edited or hostile JSON document holds, and the
CLI runs in-process on real files and a real embedded store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_models import build_bert

import ctxemb_core.backends.onnx as onnx_backend
from ctxemb_core.backends.onnx import OnnxEncoder, export_dir
from ctxemb_core.backends.torch import TorchEncoder
from ctxemb_core.errors import CtxembWarning

TEXTS = ["the cat sat on the mat", "a dog", "money in the bank and the river bank"]


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("CTXEMB_CACHE_DIR", str(cache))
    return cache


def replace_with(target: Path, content: bytes) -> None:
    """Replace ``target`` as another process would: a new file renamed over it, old mtime kept."""
    before = target.stat()
    other = target.with_name(f".{target.name}.swap")
    other.write_bytes(content)
    os.replace(other, target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))


# -- a graph replaced between its check and its load ------------------------------------------


def test_a_graph_replaced_after_its_check_is_never_loaded(own_cache, tmp_path, monkeypatch):
    folder = build_bert(tmp_path / "bert", seed=71)
    first = OnnxEncoder(folder, quantization="int8-dynamic")  # the export and its int8 twin
    model_file = export_dir(first.weights) / "model.onnx"
    twin = first.model_file.read_bytes()
    checked = onnx_backend._stale
    swapped: list[bool] = []

    def check_then_swap(directory: Path, weights: str) -> Any:
        verdict = checked(directory, weights)
        if verdict is None and not swapped:  # the check passed: now another process swaps
            swapped.append(True)
            replace_with(model_file, twin)
        return verdict

    monkeypatch.setattr(onnx_backend, "_stale", check_then_swap)
    with pytest.warns(CtxembWarning, match=r"model\.onnx changed after it was checked"):
        encoder = OnnxEncoder(folder)
    assert swapped
    want = TorchEncoder(folder).encode(TEXTS, 32).hidden
    np.testing.assert_allclose(encoder.encode(TEXTS, 32).hidden, want, atol=1e-5)
    assert model_file.read_bytes() != twin  # made again, not left as the twin


def test_a_twin_replaced_by_the_float_graph_after_its_check_is_never_loaded(
    own_cache, tmp_path, monkeypatch
):
    folder = build_bert(tmp_path / "bert", seed=72)
    first = OnnxEncoder(folder, quantization="int8-dynamic")
    want = first.encode(TEXTS, 32).hidden
    twin_file = first.model_file
    float_graph = twin_file.with_name("model.onnx").read_bytes()
    checked = onnx_backend._twin_stale
    swapped: list[bool] = []

    def check_then_swap(model_file: Path, twin: Path, record: Path, recipe: Any) -> Any:
        verdict = checked(model_file, twin, record, recipe)
        if verdict is None and not swapped:
            swapped.append(True)
            replace_with(twin, float_graph)
        return verdict

    monkeypatch.setattr(onnx_backend, "_twin_stale", check_then_swap)
    with pytest.warns(CtxembWarning, match=r"model\.int8-dynamic\.onnx changed after it was"):
        again = OnnxEncoder(folder, quantization="int8-dynamic")
    assert swapped
    np.testing.assert_allclose(again.encode(TEXTS, 32).hidden, want, atol=1e-6)
    float_out = TorchEncoder(folder).encode(TEXTS, 32).hidden
    assert not np.allclose(again.encode(TEXTS, 32).hidden, float_out, atol=1e-6)


def test_a_graph_replaced_after_it_was_loaded_is_checked_again_by_the_next_load(
    own_cache, tmp_path
):
    folder = build_bert(tmp_path / "bert", seed=73)
    first = OnnxEncoder(folder, quantization="int8-dynamic")
    model_file = export_dir(first.weights) / "model.onnx"
    OnnxEncoder(folder)  # loaded and checked in this process: its state's digest is remembered
    replace_with(model_file, first.model_file.read_bytes())
    with pytest.warns(CtxembWarning, match=r"model\.onnx is not the file"):
        again = OnnxEncoder(folder)
    want = TorchEncoder(folder).encode(TEXTS, 32).hidden
    np.testing.assert_allclose(again.encode(TEXTS, 32).hidden, want, atol=1e-5)


@pytest.mark.parametrize("kind", ["directory", "symlink-to-twin", "record-deleted"])
def test_an_export_that_is_not_a_plain_file_is_made_again(own_cache, tmp_path, kind):
    folder = build_bert(tmp_path / "bert", seed=74)
    first = OnnxEncoder(folder, quantization="int8-dynamic")
    model_file = export_dir(first.weights) / "model.onnx"
    if kind == "directory":
        model_file.unlink()
        model_file.mkdir()
        (model_file / "model.onnx").write_bytes(first.model_file.read_bytes())
    elif kind == "symlink-to-twin":
        keep = tmp_path / "twin.onnx"
        shutil.copyfile(first.model_file, keep)
        model_file.unlink()
        model_file.symlink_to(keep)
    else:
        (model_file.parent / "export.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CtxembWarning)
        again = OnnxEncoder(folder)
    want = TorchEncoder(folder).encode(TEXTS, 32).hidden
    np.testing.assert_allclose(again.encode(TEXTS, 32).hidden, want, atol=1e-5)


# keep the imports used by later sections
_ = (json, sqlite3)
