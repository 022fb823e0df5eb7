"""The ONNX export cache: the export of each network kept per weights digest, checked before it
is served, made (by :mod:`ctxemb_core.backends.onnx_build`) when it is missing or damaged, and
published atomically. Its layout, under ``$CTXEMB_CACHE_DIR/onnx/<weights digest>/``::

    model.onnx                 the graph: input_ids, attention_mask[, token_type_ids]
                               -> last_hidden_state
    export.json                the weights digest it came from, the sha256 of each file of the
                               graph, the versions and the self-check's result
    model.int8-dynamic.onnx    a quantised twin, made on demand, and beside it
    model.int8-dynamic.json    its record: the digest of the graph it was made from, its own
                               digest and the recipe
    classifier/model.onnx      a sequence-classification network's graph -> logits
    classifier/export.json     (batch, num_labels), and its record
    layers/model.onnx          the encoder's graph -> hidden_states, every hidden state stacked
    layers/export.json         (layers + 1, batch, tokens, width), made on demand for a
                               contract whose ``layers`` is not ``"last"``, and its record

The folder's tokenizer, as transformers builds it, is kept under
``$CTXEMB_CACHE_DIR/tokenizers/<weights digest>/`` (``tokenizer.json`` and a record with its
sha256, facts and the transformers version), so a warm load reads the folder, the export and the
tokenizer with onnxruntime and ``tokenizers`` alone: transformers, which imports torch whenever
torch is installed, is not imported (see :func:`~ctxemb_core.backends._tokenize.folder_tokenizer`).

The directory is named by the weights digest, so a moved or copied folder reuses its export and
changed weights get a new one; each output has its own directory, so a classifier's export never
takes the place of an encoder's. Before an export is published it must reproduce the torch
network on a batch shaped unlike the one it was traced with (token vectors: a cosine of at least
:data:`~ctxemb_core.backends.onnx_build.CHECK_MIN_COSINE` for every token; logits: at most
:data:`~ctxemb_core.backends.onnx_build.CHECK_LOGIT_TOLERANCE` times
the largest logit, or 1, apart); an export that does not is refused, never cached. Whether the
vectors of a *contract* are reproduced is the stamp's canary to decide, as for every backend.

Nothing in the directory is served on its name alone. Every load checks each graph file against
the digest its record holds, under the rule the weights digest follows (a file is hashed once per
state: size, times, inode and its first and last 64 KiB, see :mod:`ctxemb_core._files`), so
a graph replaced by another one (the int8 twin, another model's export), truncated or
overwritten is rebuilt, never served, and so is a graph onnxruntime cannot load.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core._batches import PROGRESS_LOGGER, loading_name
from ctxemb_core._files import (
    adopt_digest,
    cache_dir,
    file_digests,
    read_with_digest,
    sha256_file,
    write_atomic,
)
from ctxemb_core.backends._tokenize import Tokenizer
from ctxemb_core.backends.onnx_recipes import (
    EXPORT_FORMAT,
    HIDDEN,
    INPUTS,
    LAYERS,
    LOGITS,
    QUANTIZATION_RECIPES,
)
from ctxemb_core.errors import (
    CtxembWarning,
    InvalidInputError,
    MissingDependencyError,
    UnsupportedModelError,
)

__all__ = [
    "MODEL_FILE",
    "CheckedExport",
    "GraphChanged",
    "checked_export",
    "checked_graph",
    "ensure_export",
    "export_dir",
    "quantized",
    "tokenizer_dir",
    "warn_rebuild",
]

#: The graph's file name in each export directory.
MODEL_FILE = "model.onnx"
# The folder's tokenizer as transformers builds it, kept under $CTXEMB_CACHE_DIR/tokenizers/
# <weights digest> (the digest covers the tokenizer's files), so that a warm load needs
# neither transformers nor torch.
_TOKENIZER_DIR = "tokenizers"
_META_FILE = "export.json"
# Where each output's export lives inside the weights digest's directory.
_OUTPUT_DIRS = {HIDDEN: "", LOGITS: "classifier", LAYERS: "layers"}
# One export at a time in a process (see ensure_export).
_EXPORT_LOCK = threading.Lock()


@dataclass(frozen=True)
class CheckedExport:
    """A checked export of an encoder, as :func:`checked_export` hands it out.

    Attributes:
        graph: the graph to serve (``model.onnx``, or its quantised twin).
        files: ``{file name: sha256}`` of the graph's files (the graph and any external
            weight data beside it), all in ``graph``'s directory.
        inputs: the graph's inputs, in the order of its signature.
        record: what the export's record says (the recipe kept, the self-check's measures,
            the versions), and the twin's record under ``"quantized"`` for a twin.
    """

    graph: Path
    files: dict[str, str]
    inputs: list[str]
    record: dict[str, Any]


@contextlib.contextmanager
def checked_export(
    folder: Path, weights: str, tokenizer: Tokenizer, quantization: str | None = None
) -> Iterator[CheckedExport]:
    """The self-checked export of the encoder in ``folder``, made first if there is none.

    For copying out of the cache (:func:`ctxemb_core.export.export_model`): the files are
    valid while the context is open (a private scratch copy, when the cache directory is not
    writable, is removed when it closes). The digests are those of the record; a copy must be
    compared with them, since another process may replace a cached file at any time.

    Raises:
        MissingDependencyError: there is no valid export and torch, transformers or onnx,
            needed to make one, are missing.
        UnsupportedModelError: no export reproduces the torch network, or the quantisation is
            not known.
    """
    if quantization is not None and quantization not in QUANTIZATION_RECIPES:
        raise UnsupportedModelError(
            f"quantization={quantization!r} is not supported; valid values are "
            f"{sorted(QUANTIZATION_RECIPES)}"
        )
    scratch: list[Path | None] = []
    try:
        model_file, work = ensure_export(folder, weights, tokenizer)
        scratch.append(work)
        meta = _read_record(model_file.parent / _META_FILE) or {}
        files = meta.get("files") if meta.get("weights") == weights else None
        if not isinstance(files, dict) or not files:  # a scratch export: no record beside it
            files = _hash_graph(model_file.parent)
        record = {k: v for k, v in meta.items() if k != "files"}
        if quantization is not None:
            model_file, work = quantized(model_file, quantization)
            scratch.append(work)
            twin = _read_record(model_file.with_name(f"model.{quantization}.json"))
            digest = twin.get("digest") if twin else None
            files = {model_file.name: str(digest) if digest else sha256_file(model_file)}
            record["quantized"] = twin or {"quantization": quantization}
        inputs = record.get("inputs")
        if not isinstance(inputs, list):
            inputs = [k for k in INPUTS if k in tokenizer.model_input_names]
        yield CheckedExport(model_file, dict(files), list(inputs), record)
    finally:
        for directory in scratch:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)


def export_dir(weights: str, output: str = HIDDEN) -> Path:
    """The cache directory of the export of the network with weights digest ``weights``.

    Args:
        output: what the export computes: ``"last_hidden_state"`` (an encoder), ``"logits"``
            (a sequence-classification network, exported to the ``classifier`` subdirectory)
            or ``"hidden_states"`` (an encoder's every hidden state, in ``layers``).
    """
    if output not in _OUTPUT_DIRS:
        raise InvalidInputError(f"output={output!r} is not known; valid are {list(_OUTPUT_DIRS)}")
    return cache_dir() / "onnx" / weights.removeprefix("sha256:") / _OUTPUT_DIRS[output]


def tokenizer_dir(weights: str) -> Path:
    return cache_dir() / _TOKENIZER_DIR / weights.removeprefix("sha256:")


class GraphChanged(Exception):
    """The graph read for loading is not the one its record names (replaced since its check),
    or not a graph of the output asked for (another output's export put in its place)."""


def checked_graph(model_file: Path, weights: str, output: str = HIDDEN) -> bytes | str:
    """What onnxruntime loads: the bytes of a published graph, proven to be the recorded ones.

    The graph was checked against its record by path; another process may replace it (an
    export, a twin made again, an attack) before onnxruntime opens that path. So the graph is
    read once, through one open file, and those very bytes are compared with the record and
    loaded. A graph with external weight data (over 2 GB) and a private copy made for this
    process alone (a read-only cache) are loaded by path.
    """
    if model_file.parent != export_dir(weights, output):
        return str(model_file)  # a scratch copy of this process, in a private directory
    if model_file.name == MODEL_FILE:
        files = (_read_record(model_file.parent / _META_FILE) or {}).get("files")
        if not isinstance(files, dict) or len(files) != 1:
            return str(model_file)  # external data: checked by _stale, loaded by path
        recorded = files.get(MODEL_FILE)
    else:
        record_file = model_file.with_name(f"{model_file.name.removesuffix('.onnx')}.json")
        recorded = (_read_record(record_file) or {}).get("digest")
    data, digest = read_with_digest(model_file)
    if digest != recorded:
        raise GraphChanged(
            f"{model_file.name} changed after it was checked (sha256 {digest[:12]}…, the record "
            f"says {str(recorded)[:12]}…)"
        )
    return data


_progress = logging.getLogger(PROGRESS_LOGGER)


def warn_rebuild(directory: Path, why: str) -> None:
    warnings.warn(
        CtxembWarning(
            f"the cached ONNX export in {directory} was not served: {why}. It is made again; if "
            "this repeats, something else writes into the cache directory (CTXEMB_CACHE_DIR)."
        ),
        stacklevel=4,
    )


def _read_record(file: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _check_files(directory: Path, files: Any) -> str | None:
    """Why the files recorded as ``{name: sha256}`` do not match what lies in ``directory``."""
    if (
        not isinstance(files, dict)
        or not files
        or not all(
            isinstance(n, str) and n == Path(n).name and not n.startswith(".") for n in files
        )
    ):
        return "its record lists no graph files"
    paths = [directory / name for name in sorted(files)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        return f"{', '.join(missing)} is missing"
    try:
        digests = file_digests(paths)
    except OSError as exc:
        return f"its files cannot be read ({exc})"
    for path, digest in zip(paths, digests, strict=True):
        if files[path.name] != digest:
            return (
                f"{path.name} is not the file that was exported (sha256 {digest[:12]}…, the "
                f"record says {str(files[path.name])[:12]}…)"
            )
    return None


def _stale(directory: Path, weights: str) -> tuple[str, bool] | None:
    """Why the export in ``directory`` cannot be served, and whether that means damage.

    ``None`` when the record is of this format and these weights and every graph file it
    lists has the digest it records. No export yet, or one of another format, is a plain miss.
    """
    meta = _read_record(directory / _META_FILE)
    if meta is None:
        return "there is no export", False
    if meta.get("format") != EXPORT_FORMAT:
        return f"the export is of format {meta.get('format')!r}, not {EXPORT_FORMAT}", False
    if meta.get("weights") != weights:
        return f"its record names the weights {meta.get('weights')!r}", True
    files = meta.get("files")
    if not isinstance(files, dict) or MODEL_FILE not in files:
        return f"its record lists no {MODEL_FILE}", True
    damage = _check_files(directory, files)
    return None if damage is None else (damage, True)


def ensure_export(
    folder: Path,
    weights: str,
    tokenizer: Tokenizer,
    *,
    redo: str | None = None,
    output: str = HIDDEN,
) -> tuple[Path, Path | None]:
    """The model file of a checked export, exporting first if there is none that passes.

    Args:
        redo: why the cached export, although it passes its record, must be made again.
        output: what the network exports: its last hidden state or its logits.

    Returns the model file and the scratch directory of a new export, for the caller to remove
    once the model is loaded (it holds the model itself when the export could not be cached).
    """
    target = export_dir(weights, output)
    if redo is None and _stale(target, weights) is None:
        return target / MODEL_FILE, None
    # One export at a time in a process: the TorchScript exporter keeps global state, and a
    # second thread waiting here then finds the first one's export.
    with _EXPORT_LOCK:
        stale = (redo, True) if redo is not None else _stale(target, weights)
        if stale is None:
            return target / MODEL_FILE, None
        why, damaged = stale
        if damaged and redo is None:
            warn_rebuild(target, why)
        try:
            target.mkdir(parents=True, exist_ok=True)
            # Scratch inside the target: the final os.replace stays on one filesystem (atomic).
            work = Path(tempfile.mkdtemp(prefix=".export-", dir=target))
        except OSError:
            # A read-only cache only costs speed: export for this process alone.
            work = Path(tempfile.mkdtemp(prefix="ctxemb-onnx-"))
        # ~15 s for MiniLM with nothing said would look like a hang (the CLI shows these lines;
        # a library caller sees them only if it asks for the progress logger's INFO records).
        what = loading_name(folder.name) + ("" if output == HIDDEN else f" ({output})")
        _progress.info(
            "building the ONNX export of %s (one time per model, ~15 s for MiniLM)…", what
        )
        started = time.monotonic()
        try:
            from ctxemb_core.backends.onnx_build import build_export

            meta = build_export(folder, work / MODEL_FILE, tokenizer, weights, output=output)
        except MissingDependencyError as exc:
            shutil.rmtree(work, ignore_errors=True)
            if not damaged:
                raise
            raise MissingDependencyError(
                f"the cached ONNX export in {target} cannot be served ({why}), and making it "
                f"again failed: {exc}"
            ) from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _progress.info(
            "built the ONNX export in %.0f s; later loads reuse it", time.monotonic() - started
        )
        meta["files"] = _hash_graph(work)
        try:
            _publish(work, target, meta)
        except OSError:
            return work / MODEL_FILE, work
        return target / MODEL_FILE, work


def _hash_graph(work: Path) -> dict[str, str]:
    """The sha256 of each file of a fresh export: the graph and any external weight data."""
    return {p.name: sha256_file(p) for p in sorted(work.iterdir()) if p.name != _META_FILE}


def quantized(
    model_file: Path, quantization: str, *, redo: bool = False
) -> tuple[Path, Path | None]:
    """The checked quantised twin of a checked export, made beside it (atomically) if needed.

    The twin's record names the digest of the graph it was made from, its own digest and the
    recipe; a twin that does not match all three is made again, never served. Returns the twin
    and a scratch directory for the caller to remove (when the export's directory is read-only).
    """
    recipe = QUANTIZATION_RECIPES[quantization]
    made_from = recipe.get("export_format", EXPORT_FORMAT)
    if made_from != EXPORT_FORMAT:
        # The twin would be quantised from another graph than the one its value was measured
        # on: other vectors under the same contract value, the drift a version exists to stop.
        raise UnsupportedModelError(
            f"quantization={quantization!r} is a recipe over format-{made_from} exports, and "
            f"this ctxemb exports format {EXPORT_FORMAT}; use a later version of the recipe "
            f"(valid values are {sorted(QUANTIZATION_RECIPES)}) and re-embed the index"
        )
    twin = model_file.with_name(f"model.{quantization}.onnx")
    record_file = model_file.with_name(f"model.{quantization}.json")
    if not redo and _twin_stale(model_file, twin, record_file, recipe) is None:
        return twin, None
    # Making a twin needs the onnx package: the build's, imported only now.
    from ctxemb_core.backends.onnx_build import apply_recipe, import_onnx, quiet_logging

    onnx = import_onnx(quantization)
    from onnxruntime import __version__ as ort_version

    with _EXPORT_LOCK:
        stale = None if redo else _twin_stale(model_file, twin, record_file, recipe)
        if not redo and stale is None:
            return twin, None
        if stale is not None and stale[1]:
            warn_rebuild(twin.parent, stale[0])
        (source,) = file_digests([model_file])
        scratch = None
        work = twin.with_name(f".{twin.name}.{os.getpid()}.tmp")
        try:
            work.touch()
        except OSError:  # a read-only export directory: a twin for this process alone
            scratch = Path(tempfile.mkdtemp(prefix="ctxemb-onnx-"))
            work = scratch / twin.name
        try:
            with quiet_logging():  # its advice to pre-process is for static quantisation
                apply_recipe(onnx, model_file, work, recipe)
            if scratch is not None:
                return work, scratch
            hashed = work.stat()
            digest = sha256_file(work)
            # The old record goes first: a reader never pairs it with the new twin.
            record_file.unlink(missing_ok=True)
            os.replace(work, twin)
        except BaseException:
            work.unlink(missing_ok=True)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        adopt_digest(twin, digest, hashed)
        record = {
            "format": EXPORT_FORMAT,
            "quantization": quantization,
            "source": source,
            "digest": digest,
            "recipe": recipe,
            "onnxruntime": ort_version,
        }
        write_atomic(record_file, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return twin, None


def _twin_stale(
    model_file: Path, twin: Path, record_file: Path, recipe: dict[str, Any]
) -> tuple[str, bool] | None:
    """Why a quantised twin cannot be served, and whether that means damage (as ``_stale``)."""
    record = _read_record(record_file)
    if record is None or not twin.is_file():
        return f"there is no {twin.name} with its record", False
    if record.get("format") != EXPORT_FORMAT or record.get("recipe") != recipe:
        return f"{twin.name} was made by another recipe", False
    try:
        source, digest = file_digests([model_file, twin])
    except OSError as exc:
        return f"{twin.name} cannot be read ({exc})", True
    if record.get("source") != source:
        return f"{twin.name} was made from another graph than {model_file.name}", True
    if record.get("digest") != digest:
        return f"{twin.name} is not the twin its record describes (sha256 {digest[:12]}…)", True
    return None


def _publish(work: Path, target: Path, meta: dict[str, Any]) -> None:
    # Each file arrives whole (os.replace) and the record last, so a reader that trusts the
    # record finds a complete model; two processes exporting at once each replace the files with
    # an equivalent export of the same weights.
    # Quantised twins belong to the export they were made from: a new export drops them.
    for twin in [*target.glob("model.*.onnx"), *target.glob("model.*.json")]:
        twin.unlink(missing_ok=True)
    files: dict[str, str] = meta["files"]
    hashed = {name: (work / name).stat() for name in files}
    for name in sorted(files, key=lambda n: n == MODEL_FILE):  # the graph last
        os.replace(work / name, target / name)  # external weight data, for a graph over 2 GB
    for name, digest in files.items():
        adopt_digest(target / name, digest, hashed[name])
    record = work / _META_FILE
    record.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(record, target / _META_FILE)
