"""``ctxemb export``: a model folder made into one that serves without torch.

:func:`export_model` writes a self-contained folder: the self-checked ONNX graph of the
contract's network (its int8 twin for a quantised contract), the tokenizer as ``tokenizer.json``
with the facts that reproduce transformers' tokenization exactly, the dense heads as ``.npy``,
``contract.json`` and a manifest holding the sha256 of every file (the layout is drawn in
:mod:`ctxemb_core.backends.exported`). :meth:`ctxemb_core.Embedder.from_export` serves it with
numpy, ``tokenizers`` and onnxruntime alone, under the original contract's fingerprint, so
an index stamped through the torch backend verifies through the export.

Example:
    >>> from ctxemb_core import Embedder
    >>> from ctxemb_core.export import export_model
    >>> folder = export_model("sentence-transformers/all-MiniLM-L6-v2", "minilm-export")
    >>> Embedder.from_export(folder).embed_query("hello").shape  # doctest: +SKIP
    (384,)
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._files import replace_folder, sha256_file
from ctxemb_core._version import __version__
from ctxemb_core.backends.exported import ExportEncoder
from ctxemb_core.backends.onnx_cache import checked_export
from ctxemb_core.contract import LAST_LAYER, EmbeddingContract
from ctxemb_core.errors import (
    ContractMismatchError,
    InvalidInputError,
    MalformedModelError,
    MissingDependencyError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.folders.manifest import (
    CONTRACT_FILE,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    MANIFEST,
)
from ctxemb_core.folders.manifest import is_export as _is_export
from ctxemb_core.folders.static import is_static_folder
from ctxemb_core.pooling import DenseHead
from ctxemb_core.remedy import Said
from ctxemb_core.resolve import check_fits, contract_for, export_contract

__all__ = ["export_contract", "export_model", "is_export"]

_TOKENIZER_FILE = "tokenizer.json"
_EXTRA = "pip install 'ctxemb[torch]'"
# Texts whose token ids the export's tokenizer must reproduce before the folder is published:
# short, empty, accented, CJK, emoji, whitespace, and long ones the contract's max_tokens cuts.
_CHECK_TEXTS = (
    "",
    "hello",
    "The quick brown fox jumps over the lazy dog.",
    "Café prices rose 3.5% in 2024 — según el informe, ¿por qué?",
    "東京は日本の首都です。 emoji 🙂 <>&%$#@!",
    "   leading and trailing   whitespace\n\ttabs   ",
    "don't won't can't https://example.org/path?query=1&x=y Ünïcödé ñ ß ø å",
    "A long document about protein folding and molecular dynamics. " * 80,
    " ".join(f"token{i}" for i in range(600)),
)


def is_export(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder :func:`export_model` wrote (its manifest is there; the files
    are verified when the export is read, by :func:`export_contract` or the embedder)."""
    return _is_export(path)


def export_model(
    contract_or_model: EmbeddingContract | str | os.PathLike[str],
    directory: str | os.PathLike[str],
    *,
    overwrite: bool = False,
) -> Path:
    """Write the export of a contract's network to ``directory``; returns the folder.

    The graph is the ONNX backend's self-checked export (made now if the cache has none, which
    needs torch, transformers and onnx); the folder is written beside ``directory`` and moved
    into place whole, after its tokenizer was shown to give transformers' token ids.

    Args:
        contract_or_model: an :class:`~ctxemb_core.EmbeddingContract`, the path of a contract
            JSON file (``contract.to_json()``), or a model name or folder (read with
            :func:`~ctxemb_core.contract_for`).
        directory: where the export goes: a new or empty folder, or an export to replace.
        overwrite: replace an existing export in ``directory``.

    Raises:
        InvalidInputError: ``directory`` is a file, a non-empty folder that is not an export,
            or an export and ``overwrite`` is false; or the source is already an export.
        UnsupportedModelError: a contract with a separate query encoder or with ``layers``
            other than ``"last"``, a network no export reproduces, a quantisation not known.
        ContractMismatchError: the folder found holds other weights than the contract pins.
        MissingDependencyError: the export must be made and torch, transformers or onnx are
            missing (``pip install 'ctxemb[torch]'``).
    """
    contract = _contract_of(contract_or_model)
    target = Path(directory).expanduser().absolute()
    _check_target(target, overwrite)
    if contract.query_model is not None:
        raise UnsupportedModelError(
            f"{contract.model} has a separate query encoder ({contract.query_model}); exports "
            "of DPR-style pairs are not supported: serve it with Embedder(contract)"
        )
    if contract.layers != LAST_LAYER:
        raise UnsupportedModelError(
            f"the contract of {contract.model} mixes hidden layers (layers={contract.layers!r}), "
            "and an export's graph gives the last layer only: serve it with Embedder(contract) "
            "from the model folder (backend 'onnx' or 'torch')"
        )
    folder = locate_model(contract.model, contract.weights, exports=False)
    if is_export(folder):
        raise InvalidInputError(
            f"{folder} is an export already: copy the folder, or export from the model folder "
            "it was made from"
        )
    if is_static_folder(folder):
        raise UnsupportedModelError(
            f"{folder} is a static model (a lookup table, no network): it needs no export, since "
            "numpy and tokenizers alone serve it: Embedder(contract_for(folder))"
        )
    layout = read_layout(folder)
    actual = weights_digest(layout)
    if actual != contract.weights:
        raise ContractMismatchError(contract, contract.with_(weights=actual))
    check_fits(contract, layout.dimension, layout.max_positions, folder)
    tokenizer = _folder_tokenizer(layout.transformer)
    quantization = contract.quantization.value if contract.quantization else None
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.ctxemb-export-", dir=target.parent))
    try:
        try:
            with checked_export(layout.transformer, actual, tokenizer, quantization) as graph:
                files = _copy_graph(graph.graph.parent, graph.files, work)
                record = graph.record
                inputs = graph.inputs
                graph_name = graph.graph.name
        except MissingDependencyError as exc:
            raise MissingDependencyError(
                f"exporting {contract.model} needs torch, transformers and onnx, which make its "
                f"ONNX graph ({exc}); install them with {_EXTRA}, or export where they are "
                "installed and copy the folder"
            ) from None
        files[_TOKENIZER_FILE] = _write(work / _TOKENIZER_FILE, tokenizer.to_json().encode())
        files[CONTRACT_FILE] = _write(work / CONTRACT_FILE, (contract.to_json() + "\n").encode())
        dense = []
        for i, spec in enumerate(layout.dense):
            head = DenseHead(spec.path, spec.activation)
            entry: dict[str, Any] = {
                "weight": f"dense_{i}.weight.npy",
                "bias": None if head.bias is None else f"dense_{i}.bias.npy",
                "activation": spec.activation,
                "in_features": int(head.weight.shape[0]),
                "out_features": int(head.weight.shape[1]),
            }
            files[entry["weight"]] = _save_npy(work / entry["weight"], head.weight)
            if head.bias is not None:
                files[entry["bias"]] = _save_npy(work / entry["bias"], head.bias)
            dense.append(entry)
        manifest = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "model": contract.model,
            "fingerprint": contract.fingerprint,
            "weights": contract.weights,
            "quantization": quantization,
            "graph": graph_name,
            "inputs": inputs,
            "output": "last_hidden_state",
            "hidden_size": int(layout.hidden_size),
            "dimension": int(layout.dimension),
            "max_positions": layout.max_positions,
            "tokenizer": {"file": _TOKENIZER_FILE, **tokenizer.facts()},
            "dense": dense,
            "files": dict(sorted(files.items())),
            "versions": _versions(record),
            "export_record": record,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        (work / MANIFEST).write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        _self_check(work, contract, tokenizer)
        _publish(work, target, overwrite)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


# -- helpers ---------------------------------------------------------------------------------


def _contract_of(value: Any) -> EmbeddingContract:
    """The contract of an :class:`EmbeddingContract`, a contract JSON file or a model."""
    if isinstance(value, EmbeddingContract):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidInputError(
            "export_model needs an EmbeddingContract, a contract JSON file or a model name or "
            f"folder, got {type(value).__name__}"
        )
    path = Path(value).expanduser()
    if path.is_file():
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"{path} cannot be read ({exc})") from None
        return EmbeddingContract.from_json(text)
    if is_export(path):
        return export_contract(path)
    return contract_for(value)


def _check_target(target: Path, overwrite: bool) -> None:
    if target.exists() and not target.is_dir():
        raise InvalidInputError(f"{target} is a file; an export is written to a folder")
    if not target.is_dir() or not any(target.iterdir()):
        return
    if not (target / MANIFEST).is_file():
        raise InvalidInputError(
            f"{target} is not empty and holds no ctxemb export: it is never replaced (even with "
            "overwrite); choose a new or empty folder"
        )
    if not overwrite:
        raise Said("pass overwrite=True", "give --overwrite").into(
            InvalidInputError, f"{target} holds an export already; {{do}} to replace it"
        )


def _folder_tokenizer(folder: Path) -> Any:
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"exporting reads the model's tokenizer with transformers ({exc}); install it "
            f"with {_EXTRA}"
        ) from None
    from ctxemb_core.backends._tokenize import FolderTokenizer

    return FolderTokenizer(folder)


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return sha256_file(path)


def _save_npy(path: Path, array: np.ndarray) -> str:
    with path.open("wb") as fh:
        np.save(fh, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)
    return sha256_file(path)


def _copy_graph(source: Path, files: dict[str, str], work: Path) -> dict[str, str]:
    """Copy the graph's files into ``work``, each proven to be the checked one by its digest."""
    out = {}
    for name, digest in files.items():
        shutil.copyfile(source / name, work / name)
        got = sha256_file(work / name)
        if got != digest:
            raise MalformedModelError(
                f"{source / name} changed while it was copied (sha256 {got[:12]}…, its record "
                f"says {str(digest)[:12]}…); something else writes into the cache directory "
                "(CTXEMB_CACHE_DIR). Run the export again."
            )
        out[name] = got
    return out


def _versions(record: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime
    import tokenizers

    return {
        "ctxemb": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tokenizers": tokenizers.__version__,
        "onnxruntime": onnxruntime.__version__,
        **{k: record.get(k) for k in ("torch", "transformers", "onnx")},
    }


def _self_check(work: Path, contract: EmbeddingContract, reference: Any) -> None:
    """Load the folder the way it will be served and compare its token ids with transformers'."""
    encoder = ExportEncoder(work)
    for limit in sorted({contract.max_tokens, 8}):
        _, want = reference(list(_CHECK_TEXTS), limit)
        _, got = encoder.tokenizer(list(_CHECK_TEXTS), limit)
        for key, array in want.items():
            if key not in got or not np.array_equal(array, got[key]):
                raise UnsupportedModelError(
                    f"the exported tokenizer of {contract.model} does not reproduce "
                    f"transformers' {key} (max_tokens={limit}); this model cannot be exported"
                )


def _publish(work: Path, target: Path, overwrite: bool) -> None:
    """Move the finished folder to ``target``, replacing an export there when allowed."""
    _check_target(target, overwrite)  # again: the folder may have filled meanwhile
    replace_folder(work, target, "export")
