"""Model folders are untrusted input: no code from them runs, no pickle is loaded, and every
malformed file is refused with a typed error before anything deep inside can fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import build_bert, build_sentence_transformer

from ctxemb_core import contract_for
from ctxemb_core.backends._tokenize import FolderTokenizer
from ctxemb_core.backends.torch import TorchEncoder
from ctxemb_core.errors import (
    CtxembError,
    DataFormatError,
    InvalidInputError,
    MalformedModelError,
    ModelNotFoundError,
    PickledWeightsError,
    UnsupportedModelError,
)
from ctxemb_core.pooling import DenseHead
from ctxemb_core.resolve import read_layout, weights_digest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


# -- folders that would run code ----------------------------------------------------------------

EVIL_MODULE = """
import os
from pathlib import Path

# Importing this file is the attack: it proves code from the model folder ran.
Path(os.environ["CTXEMB_TEST_MARKER"]).write_text("ran")

from transformers import BertTokenizerFast, PretrainedConfig, PreTrainedModel


class EvilConfig(PretrainedConfig):
    model_type = "ctxemb_evil"


class EvilModel(PreTrainedModel):
    config_class = EvilConfig


class EvilTokenizer(BertTokenizerFast):
    pass
"""


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


def _evil_folder(base: Path, *, model_type: str = "ctxemb_evil", tokenizer: bool = False) -> Path:
    """A working tiny BERT whose config maps its classes to evil.py, as hub repos with custom
    code do (``tokenizer=True``: its tokenizer too); importing evil.py writes the marker."""
    folder = build_bert(base / "evil")
    config = _json(folder / "config.json")
    config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    if tokenizer:
        custom = ["evil.EvilTokenizer", "evil.EvilTokenizer"]
        config["auto_map"]["AutoTokenizer"] = custom
        tok_config = _json(folder / "tokenizer_config.json")
        tok_config.pop("tokenizer_class")
        _write(
            folder / "tokenizer_config.json", {**tok_config, "auto_map": {"AutoTokenizer": custom}}
        )
    _write(folder / "config.json", config)
    (folder / "evil.py").write_text(EVIL_MODULE, encoding="utf-8")
    return folder


def _run(code: str, marker: Path, tmp_path: Path, stdin: str | None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that answers "y" to any prompt (or has no stdin)."""
    env = {
        **os.environ,
        "CTXEMB_TEST_MARKER": str(marker),
        "HF_HUB_OFFLINE": "1",
        # Where transformers would copy the folder's module before importing it.
        "HF_MODULES_CACHE": str(tmp_path / "hf_modules"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.heavy
@pytest.mark.parametrize(("auto", "tokenizer"), [("AutoModel", False), ("AutoTokenizer", True)])
def test_the_evil_folders_run_their_code_when_transformers_is_asked_without_the_flag(
    tmp_path, auto, tokenizer
):
    # The control: the folders are really dangerous. transformers prompts "[y/N]" and, answered
    # "y", imports evil.py. Nothing ctxemb does may ever get this far.
    folder = _evil_folder(tmp_path, tokenizer=tokenizer)
    marker = tmp_path / "marker"
    code = f"""
        import transformers
        try:
            transformers.{auto}.from_pretrained({str(folder)!r})
        except Exception:
            pass  # it may fail after the import: the harm is done by then
    """
    out = _run(code, marker, tmp_path, stdin="y\n")
    assert "[y/N]" in out.stdout
    assert marker.read_text() == "ran"


@pytest.mark.heavy
@pytest.mark.parametrize("stdin", ["y\n", None], ids=["answers-yes", "stdin-closed"])
def test_no_code_from_an_auto_map_folder_ever_runs(tmp_path, stdin):
    model_only = _evil_folder(tmp_path / "model")
    with_tokenizer = _evil_folder(tmp_path / "tokenizer", tokenizer=True)
    bert_typed = _evil_folder(tmp_path / "known", model_type="bert")
    marker = tmp_path / "marker"
    # The loaders are called directly too, past read_layout's refusal, to prove that their
    # transformers calls never run the folder's code or prompt for it.
    code = f"""
        from pathlib import Path
        from ctxemb_core import contract_for
        from ctxemb_core.backends._tokenize import FolderTokenizer
        from ctxemb_core.backends.torch import TorchEncoder
        from ctxemb_core.errors import UnsupportedModelError

        calls = [
            ("contract_for", lambda: contract_for({str(model_only)!r}, pooling="mean")),
            ("contract_for-tok", lambda: contract_for({str(with_tokenizer)!r}, pooling="mean")),
            ("contract_for-bert", lambda: contract_for({str(bert_typed)!r}, pooling="mean")),
            ("TorchEncoder", lambda: TorchEncoder(Path({str(model_only)!r}))),
            ("FolderTokenizer", lambda: FolderTokenizer(Path({str(with_tokenizer)!r}))),
        ]
        for name, call in calls:
            try:
                call()
            except UnsupportedModelError as exc:
                print(name, "refused:", str(exc).replace("\\n", " "))
            else:
                print(name, "LOADED")
    """
    out = _run(code, marker, tmp_path, stdin=stdin)
    assert out.returncode == 0, out.stderr
    assert not marker.exists(), out.stdout
    assert "[y/N]" not in out.stdout
    refused = dict(line.split(" refused: ", 1) for line in out.stdout.splitlines())
    assert set(refused) == {
        "contract_for",
        "contract_for-tok",
        "contract_for-bert",
        "TorchEncoder",
        "FolderTokenizer",
    }, out.stdout
    assert all("auto_map" in refused[k] for k in refused if k.startswith("contract_for"))
    assert "cannot load the network" in refused["TorchEncoder"]  # refused by AutoModel itself
    assert "custom code" in refused["FolderTokenizer"]
    # A known model_type with an auto_map would load transformers' own BertModel, not the
    # author's network: read_layout refuses it before any loader sees it.
    with pytest.raises(UnsupportedModelError, match="auto_map"):
        read_layout(bert_typed)


# -- pickles that would run code ----------------------------------------------------------------


class _Boom:
    """Unpickling this writes the marker file: a stand-in for any code a pickle can run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def _malicious_pickle(path: Path, marker: Path) -> Path:
    torch.save({"linear.weight": _Boom(marker), "linear.bias": _Boom(marker)}, path)
    return path


def test_the_malicious_pickle_runs_its_code_when_unpickled(tmp_path):
    # The control: loading it without weights_only runs the payload.
    marker = tmp_path / "marker"
    pickle_file = _malicious_pickle(tmp_path / "pytorch_model.bin", marker)
    torch.load(pickle_file, weights_only=False)
    assert marker.read_text() == "ran"


def test_pickled_dense_heads_are_refused_and_never_unpickled(tmp_path, tiny_st_factory):
    marker = tmp_path / "marker"
    folder = tmp_path / "st"
    shutil.copytree(tiny_st_factory(dense_out=16), folder)
    dense = folder / "2_Dense"
    (dense / "model.safetensors").unlink()
    _malicious_pickle(dense / "pytorch_model.bin", marker)
    with pytest.raises(PickledWeightsError, match="safetensors") as info:
        contract_for(folder)
    assert info.value.folder == str(dense)
    with pytest.raises(PickledWeightsError):
        DenseHead(dense, "torch.nn.modules.activation.Tanh")
    assert not marker.exists()


def test_pickled_networks_are_refused_and_a_pickle_beside_safetensors_is_ignored(tmp_path):
    marker = tmp_path / "marker"
    folder = build_bert(tmp_path / "bert")
    before = weights_digest(folder)
    _malicious_pickle(folder / "pytorch_model.bin", marker)
    # Beside safetensors the pickle is never read, and so never digested either.
    assert weights_digest(folder) == before
    encoder = TorchEncoder(folder)
    assert encoder.encode(["a test"], max_tokens=16).hidden.shape[-1] == 32
    (folder / "model.safetensors").unlink()
    with pytest.raises(PickledWeightsError, match=r"save_pretrained"):
        contract_for(folder, pooling="mean")
    with pytest.raises(PickledWeightsError):
        TorchEncoder(folder)
    assert not marker.exists()


# -- malformed folders ----------------------------------------------------------------------------

Mutation = Callable[[Path], None]


def _edit_json(relative: str, change: Callable[[Any], Any]) -> Mutation:
    def mutate(folder: Path) -> None:
        path = folder / relative
        _write(path, change(_json(path)))

    return mutate


def _set(relative: str, key: str, value: Any) -> Mutation:
    return _edit_json(relative, lambda data: {**data, key: value})


def _modules(change: Callable[[list[Any]], Any]) -> Mutation:
    return _edit_json("modules.json", change)


def _module_path(index: int, path: Any) -> Mutation:
    return _modules(lambda m: [{**e, "path": path} if i == index else e for i, e in enumerate(m)])


def _raw(relative: str, text: str) -> Mutation:
    def mutate(folder: Path) -> None:
        (folder / relative).write_text(text, encoding="utf-8")

    return mutate


def _symlink_pooling_outside(folder: Path) -> None:
    outside = folder.parent / "outside_pooling"
    shutil.copytree(folder / "1_Pooling", outside)
    shutil.rmtree(folder / "1_Pooling")
    (folder / "1_Pooling").symlink_to(outside, target_is_directory=True)


def _swap(a: int, b: int) -> Mutation:
    def change(modules: list[Any]) -> list[Any]:
        modules[a], modules[b] = modules[b], modules[a]
        return modules

    return _modules(change)


POOL = "1_Pooling/config.json"
DENSE = "2_Dense/config.json"
ST = "config_sentence_transformers.json"
SBERT = "sentence_bert_config.json"
TOK = "tokenizer_config.json"

MALFORMED: list[tuple[str, Mutation, type[CtxembError], str]] = [
    # modules.json
    ("modules.json not JSON", _raw("modules.json", "{nope"), MalformedModelError, "cannot read"),
    ("modules.json an object", _raw("modules.json", "{}"), MalformedModelError, "list"),
    ("module entry a string", _modules(lambda m: ["0", *m[1:]]), MalformedModelError, "object"),
    ("module entry null", _modules(lambda m: [*m, None]), MalformedModelError, "object"),
    (
        "module type a list",
        _modules(lambda m: [{**m[0], "type": [1]}, *m[1:]]),
        MalformedModelError,
        "type",
    ),
    (
        "module type missing",
        _modules(lambda m: [{"path": ""}, *m[1:]]),
        MalformedModelError,
        "type",
    ),
    (
        "module path missing",
        _modules(lambda m: [{"type": m[0]["type"]}, *m[1:]]),
        MalformedModelError,
        "path",
    ),
    ("module path a number", _module_path(1, 3), MalformedModelError, "path"),
    ("module path absolute", _module_path(1, "/etc"), MalformedModelError, "absolute"),
    ("module path leaves the folder", _module_path(1, "../.."), MalformedModelError, "outside"),
    ("transformer path leaves", _module_path(0, ".."), MalformedModelError, "outside"),
    ("module folder a symlink out", _symlink_pooling_outside, MalformedModelError, "outside"),
    (
        "foreign module class",
        _modules(lambda m: [{**m[0], "type": "evil.Transformer"}, *m[1:]]),
        UnsupportedModelError,
        "evil.Transformer",
    ),
    ("no Transformer module", _modules(lambda m: m[1:]), UnsupportedModelError, "graph"),
    ("Dense before Pooling", _swap(1, 2), UnsupportedModelError, "graph"),
    ("Normalize before Dense", _swap(2, 3), UnsupportedModelError, "graph"),
    (
        "two Pooling modules",
        _modules(lambda m: [m[0], m[1], m[1], *m[2:]]),
        UnsupportedModelError,
        "graph",
    ),
    (
        "a deeply nested modules.json",
        _raw("modules.json", "[" * 100_000 + "]" * 100_000),
        MalformedModelError,
        "nested too deeply",
    ),
    # config.json of the network
    ("config.json a list", _raw("config.json", "[1, 2]"), MalformedModelError, "JSON object"),
    (
        "hidden_size a bool",
        _set("config.json", "hidden_size", True),
        MalformedModelError,
        "hidden_size",
    ),
    (
        "hidden_size a float",
        _set("config.json", "hidden_size", 32.0),
        MalformedModelError,
        "hidden_size",
    ),
    (
        "hidden_size a string",
        _set("config.json", "hidden_size", "32"),
        MalformedModelError,
        "hidden_size",
    ),
    (
        "positions negative",
        _set("config.json", "max_position_embeddings", -1),
        MalformedModelError,
        "max_position_embeddings",
    ),
    (
        "config.json custom code",
        _set("config.json", "auto_map", {"AutoModel": "x.Y"}),
        UnsupportedModelError,
        "auto_map",
    ),
    # config_sentence_transformers.json
    ("st config a list", _raw(ST, "[]"), MalformedModelError, "JSON object"),
    ("prompts a list", _set(ST, "prompts", ["query: "]), MalformedModelError, "prompts"),
    ("prompt not a string", _set(ST, "prompts", {"query": 1}), MalformedModelError, "prompts"),
    (
        "default prompt a list",
        _set(ST, "default_prompt_name", ["query"]),
        MalformedModelError,
        "default_prompt_name",
    ),
    (
        "default prompt unknown",
        _set(ST, "default_prompt_name", "nope"),
        MalformedModelError,
        "default_prompt_name",
    ),
    (
        "a sparse encoder",
        _set(ST, "model_type", "SparseEncoder"),
        UnsupportedModelError,
        "SparseEncoder",
    ),
    # 1_Pooling/config.json
    ("pooling config a list", _raw(POOL, '["mean"]'), MalformedModelError, "JSON object"),
    ("pooling mode a number", _set(POOL, "pooling_mode", 3), UnsupportedModelError, "pooling"),
    (
        "pooling mode a dict",
        _set(POOL, "pooling_mode", {"mean": 1}),
        UnsupportedModelError,
        "pooling",
    ),
    (
        "include_prompt a string",
        _set(POOL, "include_prompt", "false"),
        MalformedModelError,
        "include_prompt",
    ),
    (
        "legacy flag a string",
        _edit_json(
            POOL,
            lambda c: (
                {k: v for k, v in c.items() if k != "pooling_mode"}
                | {"pooling_mode_mean_tokens": "yes"}
            ),
        ),
        MalformedModelError,
        "pooling_mode_mean_tokens",
    ),
    # 2_Dense/config.json
    ("dense config a list", _raw(DENSE, "[16]"), MalformedModelError, "JSON object"),
    (
        "dense out_features a float",
        _set(DENSE, "out_features", 16.0),
        MalformedModelError,
        "out_features",
    ),
    (
        "dense out_features a string",
        _set(DENSE, "out_features", "16"),
        MalformedModelError,
        "out_features",
    ),
    (
        "dense in_features a bool",
        _set(DENSE, "in_features", True),
        MalformedModelError,
        "in_features",
    ),
    (
        "dense in_features missing",
        _edit_json(DENSE, lambda c: {k: v for k, v in c.items() if k != "in_features"}),
        MalformedModelError,
        "in_features",
    ),
    ("dense shape against weights", _set(DENSE, "out_features", 8), MalformedModelError, "shape"),
    (
        "dense chain does not fit",
        _set("config.json", "hidden_size", 24),
        MalformedModelError,
        "do not fit",
    ),
    (
        "dense activation a number",
        _set(DENSE, "activation_function", 7),
        MalformedModelError,
        "activation_function",
    ),
    (
        "dense activation foreign",
        _set(DENSE, "activation_function", "evil.ReLU"),
        UnsupportedModelError,
        "evil.ReLU",
    ),
    ("dense residual", _set(DENSE, "use_residual", True), UnsupportedModelError, "residual"),
    ("dense bias a string", _set(DENSE, "bias", "yes"), MalformedModelError, "bias"),
    (
        "dense weights not safetensors",
        _raw("2_Dense/model.safetensors", "junk"),
        MalformedModelError,
        "safetensors",
    ),
    # sentence_bert_config.json and tokenizer_config.json
    (
        "max_seq_length a string",
        _set(SBERT, "max_seq_length", "64"),
        MalformedModelError,
        "max_seq_length",
    ),
    (
        "max_seq_length a bool",
        _set(SBERT, "max_seq_length", True),
        MalformedModelError,
        "max_seq_length",
    ),
    (
        "max_seq_length negative",
        _set(SBERT, "max_seq_length", -4),
        MalformedModelError,
        "max_seq_length",
    ),
    (
        "max_seq_length zero",
        _set(SBERT, "max_seq_length", 0),
        MalformedModelError,
        "max_seq_length",
    ),
    (
        "max_seq_length beyond positions",
        _set(SBERT, "max_seq_length", 4096),
        MalformedModelError,
        "positions",
    ),
    ("sbert config a list", _raw(SBERT, "[]"), MalformedModelError, "JSON object"),
    (
        "a fill-mask transformer",
        _set(SBERT, "transformer_task", "fill-mask"),
        UnsupportedModelError,
        "fill-mask",
    ),
    (
        "model_max_length a string",
        _set(TOK, "model_max_length", "512"),
        MalformedModelError,
        "model_max_length",
    ),
    (
        "model_max_length a bool",
        _set(TOK, "model_max_length", True),
        MalformedModelError,
        "model_max_length",
    ),
    (
        "model_max_length zero",
        _set(TOK, "model_max_length", 0),
        MalformedModelError,
        "model_max_length",
    ),
    ("tokenizer config a list", _raw(TOK, "[]"), MalformedModelError, "JSON object"),
    (
        "tokenizer custom code",
        _set(TOK, "auto_map", {"AutoTokenizer": ["x.Y", None]}),
        UnsupportedModelError,
        "auto_map",
    ),
    ("config too large", _raw(TOK, " " * (16 << 20) + "{}"), MalformedModelError, "larger"),
    (
        "config not UTF-8",
        lambda f: (f / ST).write_bytes(b'{"prompts": "\xff"}'),
        MalformedModelError,
        "cannot read",
    ),
]


@pytest.fixture(scope="module")
def st_with_dense(tmp_path_factory) -> Path:
    # Every file kind a folder can hold: Transformer, Pooling, Dense, Normalize, prompts, and
    # the legacy sentence_bert_config.json with max_seq_length.
    return build_sentence_transformer(
        tmp_path_factory.mktemp("untrusted") / "m",
        dense_out=16,
        prompts={"query": "query: ", "document": ""},
        legacy=True,
    )


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [pytest.param(m, e, msg, id=name) for name, m, e, msg in MALFORMED],
)
def test_malformed_folders_are_refused_with_a_typed_error(
    tmp_path, st_with_dense, mutate, error, message
):
    folder = tmp_path / "m"
    shutil.copytree(st_with_dense, folder)
    contract_for(folder)  # the copy is sound before the mutation
    mutate(folder)
    with pytest.raises(error, match=message) as info:
        contract_for(folder)
    # Typed all the way: never an AttributeError / KeyError / TypeError / ValueError from inside.
    assert isinstance(info.value, CtxembError)
    if message != "positions":  # the one contradiction contract_for lets max_tokens= resolve
        with pytest.raises(error):
            read_layout(folder)


def test_malformed_files_are_both_unsupported_models_and_data_format_errors():
    assert issubclass(MalformedModelError, UnsupportedModelError)
    assert issubclass(MalformedModelError, DataFormatError)
    assert issubclass(PickledWeightsError, UnsupportedModelError)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "vocab.txt", "config.json"])
def test_a_file_linked_to_an_endless_device_is_refused_without_reading_it(tmp_path, name):
    folder = build_bert(tmp_path / "bert")
    (folder / name).unlink()
    (folder / name).symlink_to("/dev/zero")
    with pytest.raises(MalformedModelError, match="not a regular file"):
        contract_for(folder, pooling="mean")


def test_untrusted_model_names_are_typed_errors(tmp_path):
    for name in ("x" * 5000, "a\0b", "~no-such-user-ctxemb/model"):
        with pytest.raises(ModelNotFoundError):
            contract_for(name)
    with pytest.raises(InvalidInputError, match="query_encoder must be a folder path"):
        contract_for(build_bert(tmp_path / "bert"), pooling="mean", query_encoder=42)


def test_files_linked_out_of_the_folder_still_load_as_in_the_hub_cache(tmp_path, st_with_dense):
    # The Hugging Face cache keeps every file as a link into a shared blobs folder: only module
    # folders must stay inside, the files in them may point anywhere.
    snapshot = tmp_path / "snapshots" / "rev"
    blobs = tmp_path / "blobs"
    shutil.copytree(st_with_dense, snapshot)
    blobs.mkdir()
    for i, file in enumerate(sorted(p for p in snapshot.rglob("*") if p.is_file())):
        blob = blobs / f"blob{i}"
        shutil.move(file, blob)
        file.symlink_to(blob)
    assert contract_for(snapshot, name="acme/m") == contract_for(st_with_dense, name="acme/m")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[" * 100_000, MalformedModelError),
        ("{not json", UnsupportedModelError),
        ('{"added_tokens": [], "model": 3}', UnsupportedModelError),
        (
            '{"version": "1.0", "added_tokens": [], "model": {"type": "Nope"}}',
            UnsupportedModelError,
        ),
    ],
    ids=["deep", "not-json", "model-not-object", "unknown-model-type"],
)
def test_a_broken_tokenizer_is_a_typed_error(tmp_path, text, error):
    folder = build_bert(tmp_path / "bert")
    (folder / "tokenizer.json").write_text(text, encoding="utf-8")
    with pytest.raises(error, match="tokenizer"):
        FolderTokenizer(folder)
