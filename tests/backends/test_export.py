"""ctxemb export: a folder that serves the same vectors with numpy, tokenizers and onnxruntime."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import MINILM
from samples import TEXTS
from tiny_models import build_bert, build_sentence_transformer

from ctxemb_core import Embedder, IndexStamp, _cli_export, contract_for
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.errors import (
    CtxembError,
    InvalidInputError,
    MalformedModelError,
    ModelNotFoundError,
    TruncationWarning,
    UnsupportedModelError,
)
from ctxemb_core.export import export_contract, export_model, is_export

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("torch", "transformers", "onnx", "safetensors", "sentence_transformers")

# The first twenty sample texts, each with a long tail that truncates. The tokenizer is checked
# on all twenty, the vectors on every fourth: a cut text costs the forward pass of twenty short
# ones, and five, beside the dozen other texts VARIED cuts, prove the cut as twenty did.
TAILS = [t + " " + "Überlänge 長い テキスト " * 120 for t in TEXTS[:20]]

# A few hundred varied texts: the ONNX tests' set (empty, accents, CJK, emoji, long ones cut at
# max_tokens), each also as a question, in upper case, and some with a long tail.
VARIED = [
    *TEXTS,
    *(f"What about {t}?" for t in TEXTS),
    *(t.upper() for t in TEXTS),
    *TAILS[::4],
    *(" ".join(TEXTS[i : i + 3]) for i in range(0, len(TEXTS), 2)),
    *("\u00a0" * i + "ñandú" + "\t" * i for i in range(1, 40)),
    *(f"query {i}: {'é' * (i % 7)} {chr(0x4E00 + i)} #{i}" for i in range(152)),
]


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float((a * b).sum(axis=1).min())


@pytest.fixture(scope="module")
def minilm_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_model(contract_for(MINILM), tmp_path_factory.mktemp("exports") / "minilm")


@pytest.fixture(scope="module")
def torch_minilm() -> Embedder:
    return Embedder(contract_for(MINILM), backend="torch")


def copy_of(export: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(export, target)
    return target


# -- the folder ------------------------------------------------------------------------------


def test_export_folder_lists_every_file_with_its_digest(minilm_export: Path) -> None:
    manifest = json.loads((minilm_export / "ctxemb-export.json").read_text())
    contract = contract_for(MINILM)
    assert manifest["format"] == "ctxemb-export" and manifest["version"] == 1
    assert manifest["fingerprint"] == contract.fingerprint
    assert manifest["weights"] == contract.weights
    on_disk = {p.name for p in minilm_export.iterdir()} - {"ctxemb-export.json"}
    assert set(manifest["files"]) == on_disk == {"model.onnx", "tokenizer.json", "contract.json"}
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((minilm_export / name).read_bytes()).hexdigest() == digest
    assert {"ctxemb", "numpy", "tokenizers", "onnxruntime", "torch"} <= set(manifest["versions"])
    assert manifest["tokenizer"]["pad_token"] == "[PAD]"
    assert manifest["export_record"]["check_min_cosine"] >= 0.99999
    # No scratch folder is left beside the export.
    assert [p.name for p in minilm_export.parent.iterdir()] == ["minilm"]


def test_export_contract_reads_verifies_and_registers(minilm_export: Path) -> None:
    assert is_export(minilm_export) and not is_export(minilm_export.parent)
    original = contract_for(MINILM)
    contract = export_contract(minilm_export)
    assert contract == original
    from ctxemb_core.resolve import locate_model

    assert locate_model(contract.model, contract.weights) == minilm_export.resolve()
    with pytest.raises(ModelNotFoundError, match="not a ctxemb export"):
        export_contract(minilm_export.parent)


# -- the same vectors ------------------------------------------------------------------------


@pytest.mark.heavy
def test_export_reproduces_the_torch_backend(minilm_export: Path, torch_minilm: Embedder) -> None:
    exported = Embedder.from_export(minilm_export)
    assert exported.backend == "onnx" and exported.model_path == minilm_export.resolve()
    assert exported.fingerprint == torch_minilm.fingerprint
    assert len(VARIED) >= 300
    # The network and the tokenizer are the roles' own only through the role's prefix and
    # network, which any text exercises: every text as a document, the sample set as queries
    # (empty, CJK, emoji, three cut), not every text twice through two MiniLMs.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        for embed, texts in (("embed_documents", VARIED), ("embed_queries", TEXTS)):
            got = getattr(exported, embed)(texts)
            want = getattr(torch_minilm, embed)(texts)
            assert min_cosine(got, want) >= 0.99999, embed


def test_exported_tokenizer_gives_transformers_ids(minilm_export: Path) -> None:
    from transformers import AutoTokenizer

    from ctxemb_core.backends.exported import ExportEncoder
    from ctxemb_core.resolve import locate_model

    contract = contract_for(MINILM)
    reference = AutoTokenizer.from_pretrained(str(locate_model(MINILM)))
    ours = ExportEncoder(minilm_export).tokenizer
    texts = [*VARIED, *TAILS]
    for limit in (contract.max_tokens, 16):
        want = reference(texts, truncation=True, max_length=limit, padding=True)
        _, got = ours(texts, limit)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            assert np.array_equal(np.array(want[key]), got[key]), (key, limit)


def test_stamp_written_with_torch_verifies_with_the_export(
    minilm_export: Path, torch_minilm: Embedder
) -> None:
    stamp = IndexStamp.from_embedder(torch_minilm)
    exported = Embedder.from_export(minilm_export)
    check = stamp.verify(exported)
    assert check.fingerprint == contract_for(MINILM).fingerprint
    assert check.min_cosine >= 0.99999
    # And from the stamp's metadata, as a store would hand it back.
    IndexStamp.from_metadata(stamp.to_metadata()).verify(exported)


def test_embedder_of_the_contract_finds_a_registered_export(minilm_export: Path) -> None:
    contract = export_contract(minilm_export)
    embedder = Embedder(contract)
    # The export, or a network of the same weights this process loaded before (same vectors);
    # a fresh process serves the export (test_an_export_serves_without_torch).
    exported = Embedder.from_export(minilm_export)
    assert min_cosine(embedder.embed_documents(TEXTS), exported.embed_documents(TEXTS)) > 0.99999
    # torch still finds the model folder by name: the export serves onnxruntime only.
    assert Embedder(contract, backend="torch").model_path != minilm_export.resolve()
    with pytest.raises(UnsupportedModelError, match="served by onnxruntime"):
        Embedder.from_export(minilm_export, backend="torch")
    # A config round trip keeps the export as its path hint.
    rebuilt = Embedder.from_config(json.loads(json.dumps(exported.config())))
    assert rebuilt.model_path == minilm_export.resolve()


def test_an_export_loaded_earlier_does_not_stand_in_for_the_model_folder(
    minilm_export: Path, tmp_path: Path
) -> None:
    # Loading an export registers it under the model's weights digest; a later export of the
    # same contract in this process still reads the model folder (it was refused as "an export
    # already" when the export was the latest folder registered under the digest).
    contract = contract_for(MINILM)  # registers the model folder; the export comes after it
    Embedder.from_export(minilm_export).embed_query("green tea")
    again = export_model(contract, tmp_path / "again")
    assert is_export(again) and again != minilm_export


def test_the_cache_keeps_export_vectors_apart(minilm_export: Path, tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    exported = Embedder.from_export(minilm_export, cache=cache)
    plain = Embedder(contract_for(MINILM), backend="torch", cache=cache)
    files = json.loads((minilm_export / "ctxemb-export.json").read_text())["files"]
    del files["contract.json"]  # the contract is in the fingerprint already
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    assert exported._cache_key.endswith(f":onnx:export:{digest[:16]}")
    assert exported._cache_key != plain._cache_key
    first = exported.embed_documents(["a cached text"])
    assert np.array_equal(exported.embed_documents(["a cached text"]), first)


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("model.onnx", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
        ("model.onnx", lambda p: p.unlink()),
        ("tokenizer.json", lambda p: p.write_text(p.read_text().replace("[CLS]", "[CLX]", 1))),
        ("contract.json", lambda p: p.write_text(p.read_text().replace("mean", "cls"))),
    ],
)
def test_a_damaged_file_is_refused_by_name(
    minilm_export: Path, tmp_path: Path, name: str, damage
) -> None:
    folder = copy_of(minilm_export, tmp_path)
    damage(folder / name)
    with pytest.raises(MalformedModelError) as info:
        Embedder.from_export(folder)
    message = str(info.value)
    assert name in message and "ctxemb export" in message and "--overwrite" in message


def test_a_damaged_manifest_is_refused(minilm_export: Path, tmp_path: Path) -> None:
    folder = copy_of(minilm_export, tmp_path)
    manifest = folder / "ctxemb-export.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "version": 99}))
    with pytest.raises(MalformedModelError, match="version 99"):
        export_contract(folder)
    manifest.write_text(json.dumps({**data, "fingerprint": "0" * 64}))
    with pytest.raises(MalformedModelError, match="fingerprint"):
        export_contract(folder)
    manifest.write_text("{not json")
    with pytest.raises(MalformedModelError, match="--overwrite"):
        Embedder.from_export(folder)


def test_overwrite_rules(minilm_export: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="overwrite"):
        export_model(MINILM, minilm_export)
    folder = copy_of(minilm_export, tmp_path)
    (folder / "model.onnx").write_bytes(b"junk")
    assert export_model(MINILM, folder, overwrite=True) == folder
    Embedder.from_export(folder).embed_query("repaired")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # no scratch left
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="never replaced"):
        export_model(MINILM, other, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"
    with pytest.raises(InvalidInputError, match="is a file"):
        export_model(MINILM, other / "keep.txt")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert is_export(export_model(MINILM, empty))


# -- tiny models: a dense head, int8, other sources ------------------------------------------


def test_tiny_model_with_a_dense_head(tmp_path: Path) -> None:
    folder = build_sentence_transformer(tmp_path / "st", dense_out=16, dense_activation="tanh")
    contract = contract_for(folder)
    export = export_model(contract, tmp_path / "export")
    manifest = json.loads((export / "ctxemb-export.json").read_text())
    assert [h["out_features"] for h in manifest["dense"]] == [16]
    weight = np.load(export / manifest["dense"][0]["weight"], allow_pickle=False)
    assert weight.shape == (32, 16) and weight.dtype == np.float32
    exported = Embedder.from_export(export)
    reference = Embedder(contract, path=folder, backend="torch")
    assert exported.contract.dimension == 16
    texts = [*TEXTS, "dense heads in numpy"]
    assert min_cosine(exported.embed_documents(texts), reference.embed_documents(texts)) > 0.99999
    IndexStamp.from_embedder(reference).verify(exported)


def test_quantized_contract_exports_its_int8_twin(tmp_path: Path) -> None:
    folder = build_bert(tmp_path / "bert")
    contract = contract_for(folder, pooling="mean", quantization="int8-dynamic")
    export = export_model(contract, tmp_path / "export")
    manifest = json.loads((export / "ctxemb-export.json").read_text())
    assert manifest["graph"] == "model.int8-dynamic.onnx" and manifest["quantization"]
    assert "model.onnx" not in manifest["files"]
    exported = Embedder.from_export(export)
    onnx = Embedder(contract, path=folder, backend="onnx")
    texts = TEXTS[:10]
    assert min_cosine(exported.embed_documents(texts), onnx.embed_documents(texts)) > 0.99999
    # A float contract of the same weights is not served by the int8 twin.
    from ctxemb_core.errors import ContractMismatchError

    with pytest.raises(ContractMismatchError, match="quantization"):
        Embedder(contract.with_(quantization=None), path=export)


def test_export_from_a_contract_file_and_a_folder(tmp_path: Path) -> None:
    # Weights of its own (seed): no other test's tiny BERT holds them, so deleting this folder
    # leaves the export as their only holder.
    folder = build_bert(tmp_path / "bert", seed=2501)
    contract = contract_for(folder, pooling="cls", max_tokens=32)
    saved = tmp_path / "contract.json"
    saved.write_text(contract.to_json())
    from_file = export_model(saved, tmp_path / "a")
    assert export_contract(from_file) == contract
    st = build_sentence_transformer(tmp_path / "st")
    from_folder = export_model(str(st), tmp_path / "b")
    assert export_contract(from_folder) == contract_for(st)
    # While the model folder is there, a contract read from its export exports from the folder;
    # once only the export holds the weights, exporting it again is refused with what to do.
    assert export_contract(export_model(export_contract(from_file), tmp_path / "c")) == contract
    shutil.rmtree(folder)
    with pytest.raises(InvalidInputError, match="export already"):
        export_model(export_contract(from_file), tmp_path / "d")


# -- truncation warnings ---------------------------------------------------------------------


@pytest.mark.parametrize("cached", [False, True])
def test_one_truncation_warning_per_call(minilm_export: Path, tmp_path: Path, cached: bool) -> None:
    cache = EmbeddingCache(tmp_path / "cache") if cached else None
    embedder = Embedder.from_export(minilm_export, batch_size=2, cache=cache)
    long = [f"word{i} " * 400 for i in range(5)] + ["short"]
    for call in (
        lambda: embedder.embed_documents(long),
        lambda: embedder.embed_queries(long),
        lambda: embedder.embed(long, "document"),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        found = [w for w in caught if issubclass(w.category, TruncationWarning)]
        assert len(found) == 1 and "5 of 6" in str(found[0].message)
        assert found[0].filename == __file__  # the caller's line, not ctxemb's
        assert embedder.last_truncated == 5
        # The third call would be all cache hits (nothing encoded, no warning): compute it.
        embedder.cache = None


def test_query_expansion_reads_the_exported_mask_token(minilm_export: Path) -> None:
    (tokens,) = Embedder.from_export(minilm_export).embed_token_batch(["a cat"], expand_to=8)
    assert int(tokens.expansion.sum()) == 8 - 4  # [CLS] a cat [SEP] + four [MASK]


# -- the CLI ---------------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    from ctxemb_core import cli

    parser = cli._parser()
    if "export" not in parser._subparsers._group_actions[0].choices:  # type: ignore[union-attr]
        # Not wired into cli.py yet: the same parser and handler, built beside it.
        parser = argparse.ArgumentParser(prog="ctxemb")
        _cli_export.add_parser(parser.add_subparsers(dest="command", required=True))
        try:
            return _cli_export.run(parser.parse_args(argv))
        except SystemExit as exc:
            return int(exc.code or 0)
        except CtxembError as exc:
            return cli._error(f"{type(exc).__name__}: {exc}")
    return cli.main(argv)


def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = build_bert(tmp_path / "bert")
    assert _cli(["export", str(folder), str(tmp_path / "out"), "--pooling", "cls"]) == 0
    out = capsys.readouterr().out
    contract = export_contract(tmp_path / "out")
    assert contract.pooling.value == "cls"
    assert contract.fingerprint in out and "model.onnx" in out and "from_export" in out
    assert _cli(["export", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "examples:" in help_text and "default" in help_text and "--overwrite" in help_text
    assert _cli(["export", str(folder), str(tmp_path / "out"), "--pooling", "cls"]) == 2
    assert "overwrite" in capsys.readouterr().err
    args = ["export", str(folder), str(tmp_path / "out"), "--pooling", "max", "--overwrite"]
    assert _cli(args) == 0
    assert export_contract(tmp_path / "out").pooling.value == "max"


# -- torch-free serving ----------------------------------------------------------------------

# Strict: any attempt to import (or look up) a blocked package raises ImportError.
_BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocker())
"""
# Faithful to "not installed": the path finder does not see the package, so a lookup
# (importlib.util.find_spec, which torch and transformers make) finds nothing and an import
# raises ModuleNotFoundError.
_HIDER = """
import importlib.machinery, sys
BLOCKED = {blocked!r}

class Hider(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [
    Hider if f is importlib.machinery.PathFinder else f for f in sys.meta_path
]
"""


def run_blocked(
    code: str,
    blocked: tuple[str, ...],
    env: dict[str, str] | None = None,
    *,
    hide: bool = False,
) -> str:
    script = (_HIDER if hide else _BLOCKER).format(blocked=blocked) + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_an_export_serves_without_torch(
    minilm_export: Path, torch_minilm: Embedder, tmp_path: Path
) -> None:
    stamp = tmp_path / "stamp.json"
    stamp.write_text(json.dumps(IndexStamp.from_embedder(torch_minilm).to_metadata()))
    want = torch_minilm.embed_query("Which blocks were imported?")
    out = run_blocked(
        f"""
        import json, sys
        import numpy as np
        from ctxemb_core import Embedder, IndexStamp
        from ctxemb_core.export import export_contract
        embedder = Embedder.from_export({str(minilm_export)!r})
        vector = embedder.embed_query("Which blocks were imported?")
        stamp = IndexStamp.from_metadata(json.load(open({str(stamp)!r})))
        check = stamp.verify(embedder)
        again = Embedder(export_contract({str(minilm_export)!r}))
        assert np.array_equal(again.embed_query("Which blocks were imported?"), vector)
        from ctxemb_core import contract_for
        by_folder = Embedder(contract_for({str(minilm_export)!r}))
        assert np.array_equal(by_folder.embed_query("Which blocks were imported?"), vector)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
        print(json.dumps({{"vector": vector.tolist(), "cosine": check.min_cosine,
                           "loaded": loaded}}))
        """,
        BLOCKED,
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["cosine"] >= 0.99999
    assert float(np.dot(result["vector"], want)) >= 0.99999


_AUTO = """
import json, sys, warnings
from ctxemb_core import Embedder, contract_for
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    embedder = Embedder(contract_for({folder!r}, pooling="mean"))
    vector = embedder.embed_query("no onnx package here")
print(json.dumps({{"backend": embedder.backend, "dim": len(vector),
                   "warnings": [str(w.message) for w in caught],
                   "loaded": sorted(m for m in {blocked!r} if m in sys.modules)}}))
"""


@pytest.mark.heavy
def test_auto_backend_without_the_onnx_package(tmp_path: Path) -> None:
    # The onnx package moves to the [torch] extra. With torch but no onnx, "auto" embeds on
    # torch (torch.onnx.export needs onnx), with the warning that says why and what to install.
    folder = build_bert(tmp_path / "bert")
    code = _AUTO.format(folder=str(folder), blocked=("onnx",))
    out = run_blocked(code, ("onnx",), env={"CTXEMB_CACHE_DIR": str(tmp_path / "c")}, hide=True)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["backend"] == "torch" and result["dim"] == 32 and result["loaded"] == []
    (warning,) = [w for w in result["warnings"] if "backend='auto'" in w]
    assert "pip install 'ctxemb[torch]'" in warning
    # Once the export is cached (made where onnx is installed), onnx is not needed to serve it.
    Embedder(contract_for(folder, pooling="mean"), backend="onnx")
    out = run_blocked(code, ("onnx",), hide=True)
    assert json.loads(out.strip().splitlines()[-1])["backend"] == "onnx"


def test_a_cached_onnx_export_serves_without_torch_or_transformers(tmp_path: Path) -> None:
    # The ONNX backend keeps the folder's tokenizer beside its export: a warm process reads
    # the folder, the export and the tokenizer without importing torch or transformers.
    folder = build_sentence_transformer(tmp_path / "st", dense_out=16)
    want = Embedder(contract_for(folder), backend="onnx").embed_query("no onnx package here")
    blocked = ("torch", "transformers", "onnx", "sentence_transformers")
    code = _AUTO.format(folder=str(folder), blocked=blocked).replace(', pooling="mean"', "")
    out = run_blocked(code, blocked)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["backend"] == "onnx" and result["loaded"] == [] and result["dim"] == 16
    assert not [w for w in result["warnings"] if "backend='auto'" in w]
    got = Embedder(contract_for(folder), backend="onnx").embed_query("no onnx package here")
    assert np.array_equal(got, want)


def test_contract_for_an_export_folder_is_the_exported_contract(tmp_path):
    import numpy as np
    import pytest

    from ctxemb_core.errors import InvalidContractError
    from ctxemb_core.export import export_model

    hub = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    folder = export_model(hub, tmp_path / "minilm-export")
    assert contract_for(folder) == hub
    assert contract_for(str(folder)) == hub
    served = Embedder(contract_for(folder)).embed_query("how is green tea made")
    direct = Embedder.from_export(folder).embed_query("how is green tea made")
    assert np.array_equal(served, direct)
    # What is applied to the token vectors may still be chosen; the network may not.
    e5 = contract_for(folder, family="e5", query_prefix="question: ")
    assert (e5.query_prefix, e5.document_prefix) == ("question: ", "passage: ")
    assert contract_for(folder, name="acme/minilm").diff(hub).kind.value == "label"
    assert Embedder(contract_for(folder, pooling="cls")).embed_query("x").shape == (384,)
    with pytest.raises(InvalidContractError, match="quantization"):
        contract_for(folder, quantization="int8-dynamic")
