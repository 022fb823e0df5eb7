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

import ctxemb_core.backends.onnx_cache as onnx_backend
from ctxemb_core import Embedder, contract_for
from ctxemb_core.backends.onnx import OnnxEncoder, export_dir
from ctxemb_core.backends.torch import TorchEncoder
from ctxemb_core.cache import CacheWarning, EmbeddingCache
from ctxemb_core.cli import main
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import (
    CtxembWarning,
    DataFormatError,
    InvalidContractError,
    MalformedModelError,
)
from ctxemb_core.resolve import MAX_TOKENIZER_FILE

TEXTS = ["the cat sat on the mat", "a dog", "money in the bank and the river bank"]


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


# -- contracts: values a hostile or hand-edited document may hold --------------------------------

DIGEST = "sha256:" + "ab" * 32


def make(**changes: Any) -> EmbeddingContract:
    base = {"model": "acme/enc", "weights": DIGEST, "pooling": "mean", "dimension": 384}
    return EmbeddingContract(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"dimension": 10**100},
            "dimension=1000.* is out of range; valid values are 1..2147483647",
        ),
        ({"max_tokens": 2**31}, "max_tokens=2147483648 is out of range"),
        ({"dimension": 2**40, "truncate_dim": 2**33}, "dimension=.* is out of range"),
        ({"max_tokens": float("nan")}, "max_tokens must be a positive integer, got nan"),
        ({"dimension": -0.0}, "dimension must be a positive integer, got -0.0"),
        ({"weights": " " + DIGEST}, "weights must be"),
        ({"weights": "sha256:" + "\u0661" * 64}, "weights must be"),
        ({"weights": "sha256:" + "ab" * 31 + "a\u0301"}, "weights must be"),
        ({"query_weights": DIGEST}, "query_model and query_weights go together"),
        ({"model": "acme/\ud800enc"}, "model is not valid Unicode"),
        ({"query_prefix": "query:\udcff "}, "query_prefix is not valid Unicode"),
        ({"document_prefix": "\udc80"}, "document_prefix is not valid Unicode"),
    ],
)
def test_out_of_range_and_unencodable_values_are_invalid_contracts(changes, message):
    with pytest.raises(InvalidContractError, match=message):
        make(**changes)


def test_the_largest_accepted_values_still_fingerprint():
    c = make(dimension=2**31 - 1, max_tokens=2**31 - 1, truncate_dim=2**31 - 1)
    assert EmbeddingContract.from_json(c.to_json()) == c
    assert make(truncate_dim=384).output_dim == 384  # equal to the dimension: the whole vector


def test_contract_json_with_a_repeated_field_is_refused():
    good = make().to_json()
    # json.loads keeps the last of two equal keys: which one a reader sees is a guess.
    twice = good[:-1] + ',"pooling":"cls"}'
    with pytest.raises(DataFormatError, match="'pooling' twice"):
        EmbeddingContract.from_json(twice)
    assert EmbeddingContract.from_json(good) == make()


def test_a_huge_int_in_contract_json_is_an_invalid_contract_not_an_overflow():
    text = make().to_json().replace('"dimension":384', '"dimension":' + "9" * 4000)
    with pytest.raises((InvalidContractError, DataFormatError)):
        EmbeddingContract.from_json(text)


# -- the CLI: a text no tokenizer can encode is found before the store is touched ----------------


def _write_beir(folder: Path, corpus: str, queries: str) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    (folder / "queries.jsonl").write_text(queries, encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\ta\t1\n")
    return folder


GOOD_DOC = '{"_id": "a", "text": "green tea"}\n'
# JSON may escape a lone surrogate; json.loads gives it back as one.
BAD_DOC = '{"_id": "b", "text": "broken \\ud800 text"}\n'
BAD_ID = '{"_id": "\\udcff", "text": "fine text"}\n'


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("index-text", "document 'b' is not valid Unicode"),
        ("index-id", "is not valid Unicode"),
        ("eval-text", "document 'b' is not valid Unicode"),
        ("eval-query", "query 'q' is not valid Unicode"),
        ("demo-query", "queries.jsonl:1: query is not valid Unicode"),
        ("query", "query text[0] is not valid Unicode"),
    ],
)
def test_a_text_no_tokenizer_can_encode_is_one_line_and_no_store(
    command, fragment, tmp_path, capsys
):
    store = tmp_path / "store"
    where = ["--path", str(store)]
    if command.startswith("index"):
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text(GOOD_DOC + (BAD_DOC if command == "index-text" else BAD_ID))
        args = ["index", str(corpus), "--collection", "demo", *where]
    elif command.startswith("eval"):
        bad_query = command == "eval-query"
        data = _write_beir(
            tmp_path / "beir",
            GOOD_DOC + ("" if bad_query else BAD_DOC),
            '{"_id": "q", "text": "' + ("tea \\ud83d" if bad_query else "tea") + '"}\n',
        )
        args = ["eval", "--data", str(data), *where]
    elif command == "demo-query":
        queries = tmp_path / "queries.jsonl"
        queries.write_text('{"text": "half a pair \\ud83d"}\n')
        args = ["demo", "--queries", str(queries), *where]
    else:
        store.mkdir()  # an (empty) store folder: the text is refused before it is opened
        args = ["query", "tea \udcff", "--collection", "demo", *where]
    before = sorted(p.name for p in store.iterdir()) if store.exists() else None
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxemb: error: "), err
    assert fragment in lines[0], err
    after = sorted(p.name for p in store.iterdir()) if store.exists() else None
    assert after == before  # no store made, nothing written into one


# -- the embedding cache: a link at its path is followed only to a file proven ours ---------------


def _put(cache: EmbeddingCache) -> None:
    cache.put_many("f" * 64, "document", ["a", "b"], np.ones((2, 4), np.float32))


@pytest.mark.parametrize("target", ["empty-file", "dangling", "loop", "other-database"])
def test_a_link_at_the_cache_path_to_what_is_not_ours_is_never_followed(tmp_path, target):
    other = tmp_path / "other" / "their.db"
    other.parent.mkdir()
    link = tmp_path / "cache.sqlite3"
    if target == "empty-file":
        other.write_bytes(b"")  # another program's file, not yet written
    elif target == "other-database":
        con = sqlite3.connect(other)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
    if target == "loop":
        (tmp_path / "a").symlink_to(tmp_path / "b")
        (tmp_path / "b").symlink_to(tmp_path / "a")
        link.symlink_to(tmp_path / "a")
    else:
        link.symlink_to(other)
    before = sorted((p.name, p.read_bytes()) for p in other.parent.iterdir())
    cache = EmbeddingCache(link)
    with pytest.warns(CacheWarning, match="symbolic link to .*not a ctxemb cache"):
        _put(cache)
    assert not cache.get_many("f" * 64, "document", ["a"]).found.any()
    with pytest.warns(CacheWarning, match="left .* as it is"):
        cache.clear()
    assert sorted((p.name, p.read_bytes()) for p in other.parent.iterdir()) == before
    assert link.is_symlink()


def test_a_link_to_our_own_cache_is_used(tmp_path):
    real = tmp_path / "real.sqlite3"
    _put(EmbeddingCache(real))
    link = tmp_path / "cache.sqlite3"
    link.symlink_to(real)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert EmbeddingCache(link).get_many("f" * 64, "document", ["a", "b"]).found.all()


# -- model folders: what transformers would complete at random or fail on deep inside -----------


def _edit_json(file: Path, **changes: Any) -> None:
    data = json.loads(file.read_text())
    file.write_text(json.dumps({**data, **changes}))


def test_weights_missing_a_tensor_are_refused_not_filled_at_random(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = build_bert(tmp_path / "bert", seed=75)
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    del tensors["encoder.layer.1.output.dense.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(MalformedModelError, match=r"missing \['encoder\.layer\.1\.output"):
        TorchEncoder(folder)
    # auto: the export (made from the same loader) is refused, then torch refuses too.
    with (
        pytest.warns(CtxembWarning, match="onnx backend cannot serve"),
        pytest.raises(MalformedModelError),
    ):
        Embedder(contract_for(folder, pooling="mean"), backend="auto")


def test_weights_of_more_layers_than_the_config_names_are_refused(tmp_path):
    folder = build_bert(tmp_path / "bert", seed=76)
    _edit_json(folder / "config.json", num_hidden_layers=1)  # the file holds two
    with pytest.raises(MalformedModelError, match=r"not used by its config \['encoder\.layer\.1"):
        TorchEncoder(folder)


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_attention_heads", 0), ("num_hidden_layers", -1), ("vocab_size", 0)],
)
def test_counts_in_config_that_cannot_build_the_network_are_malformed(tmp_path, key, value):
    folder = build_bert(tmp_path / "bert", seed=77)
    _edit_json(folder / "config.json", **{key: value})
    with pytest.raises(MalformedModelError, match=f"{key} must be a positive integer"):
        contract_for(folder, pooling="mean")


def test_a_hidden_size_that_does_not_fit_the_weights_is_a_typed_error(tmp_path):
    folder = build_bert(tmp_path / "bert", seed=78)
    _edit_json(folder / "config.json", hidden_size=64)
    contract = contract_for(folder, pooling="mean")  # the folder's own word, until it loads
    with pytest.raises(MalformedModelError, match="cannot load the network"):
        Embedder(contract, backend="torch")


def test_a_module_path_with_a_nul_byte_is_malformed(tmp_path, tiny_st_factory):
    folder = Path(shutil.copytree(tiny_st_factory(), tmp_path / "st"))
    modules = json.loads((folder / "modules.json").read_text())
    modules[1]["path"] = "1_Pooling\x00/../../etc"
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(MalformedModelError, match="cannot be used"):
        contract_for(folder)


def test_a_huge_tokenizer_file_is_refused_before_it_is_parsed(tmp_path):
    folder = build_bert(tmp_path / "bert", seed=79)
    tokenizer = folder / "tokenizer.json"
    with tokenizer.open("r+b") as fh:  # sparse: the size is there, the disk space is not
        fh.truncate(MAX_TOKENIZER_FILE + 1)
    with pytest.raises(MalformedModelError, match="larger than any real tokenizer file"):
        contract_for(folder, pooling="mean")
    with pytest.raises(MalformedModelError, match="larger than any real tokenizer file"):
        TorchEncoder(folder)
