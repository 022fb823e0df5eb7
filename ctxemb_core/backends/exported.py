"""Serving a ctxemb export: a folder that embeds with numpy, ``tokenizers`` and onnxruntime alone.

:func:`ctxemb_core.export.export_model` writes the folder; this module reads it, and imports
nothing else (no torch, transformers, onnx, safetensors or sentence-transformers), so a server
that only embeds needs none of them installed::

    ctxemb-export.json      the manifest: format, the sha256 of every other file, the contract's
                            fingerprint, the graph's inputs, the tokenizer's facts, dense heads,
                            versions and the record of the export's self-check
    contract.json           the contract the folder was exported under
    model.onnx              the self-checked graph (or model.int8-dynamic.onnx, its int8 twin)
    tokenizer.json          the Rust tokenizer pipeline, special tokens included
    dense_<i>.weight.npy    each dense head's (in, out) float32 weight, and its bias
    dense_<i>.bias.npy

Nothing is served on its name alone: every file is read once, its sha256 compared with the
manifest's, and those very bytes are what is loaded (the graph into onnxruntime, the tokenizer
into ``tokenizers``, the heads into numpy). A file that differs, is missing or cannot be read is
refused with :class:`~ctxemb_core.errors.MalformedModelError` naming it and the fix. The manifest
is read by :mod:`ctxemb_core.folders.manifest` (its names stay importable from here).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._files import file_digests
from ctxemb_core.backends._tokenize import Tokenizer, kept_tokenizer, token_batch, vocabulary
from ctxemb_core.backends.base import TokenBatch
from ctxemb_core.backends.onnx_recipes import runs_per_text
from ctxemb_core.backends.ort import check_threads, run_per_text, session_options
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import InvalidInputError, MalformedModelError, MissingDependencyError
from ctxemb_core.folders.manifest import (
    CONTRACT_FILE,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    MANIFEST,
    ExportManifest,
    is_export,
    read_manifest,
)
from ctxemb_core.pooling import DenseHead

__all__ = [
    "CONTRACT_FILE",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "MANIFEST",
    "ExportEncoder",
    "ExportManifest",
    "is_export",
    "read_manifest",
]

# A ctxemb export's output and the inputs its graph may take.
_OUTPUT = "last_hidden_state"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class ExportEncoder:
    """The network of a ctxemb export, run by onnxruntime; every file verified as it is read.

    Args:
        folder: the export's folder (see :func:`ctxemb_core.export.export_model`).
        device: ``"cpu"``, the only device of an export.
        threads: onnxruntime's intra-op threads; ``None`` uses one per available CPU core.

    Example:
        >>> enc = ExportEncoder(Path("minilm-export"))  # doctest: +SKIP
        >>> enc.encode(["hello"], max_tokens=128).hidden.shape  # doctest: +SKIP
        (1, 3, 384)
    """

    def __init__(
        self, folder: str | os.PathLike[str], *, device: str = "cpu", threads: int | None = None
    ) -> None:
        if device != "cpu":
            raise InvalidInputError(
                f"device={device!r} is not available to an export; valid devices are ['cpu']"
            )
        check_threads(threads)
        manifest = read_manifest(folder)
        self.manifest = manifest
        self.folder = manifest.folder
        self.device = device
        data = manifest.data
        where = str(self.folder)
        try:
            graph = data["graph"]
            inputs = list(data["inputs"])
            facts = data["tokenizer"]
            heads = list(data.get("dense") or [])
            self.hidden_size = int(data["hidden_size"])
            positions = data.get("max_positions")
            self.max_positions = None if positions is None else int(positions)
            if not isinstance(graph, str) or not isinstance(facts, Mapping):
                raise TypeError("graph or tokenizer")
            if not inputs or not set(inputs) <= set(_INPUTS):
                raise ValueError(f"inputs {inputs}")
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedModelError(
                f"{self.folder / MANIFEST} is incomplete ({exc}); {manifest.fix()}"
            ) from None
        #: The weights digest of the network the graph was exported from.
        self.weights = manifest.contract.weights
        #: The sha256 of the files that make the vectors (graph, tokenizer, heads: all but the
        #: contract), which the embedding cache keys an export's vectors by.
        self.network_digest = hashlib.sha256(
            json.dumps(
                {n: d for n, d in manifest.files.items() if n != CONTRACT_FILE}, sort_keys=True
            ).encode()
        ).hexdigest()
        text = manifest.read(str(facts.get("file", "tokenizer.json")))
        self.tokenizer = Tokenizer.from_saved(text.decode("utf-8", "replace"), facts, where)
        _check_tokenizer_of_weights(self.tokenizer, manifest)
        missing = [n for n in inputs if n != "input_ids" and n not in _tokenizer_arrays(self)]
        if missing:
            raise MalformedModelError(
                f"{where}: the graph takes {missing}, which the tokenizer does not give; "
                f"{manifest.fix()}"
            )
        self.dense = tuple(_dense_head(manifest, i, h) for i, h in enumerate(heads))
        ort = _import_onnxruntime()
        quantization = self.contract.quantization
        # The recipe's way of running its graph (one text at a time) travels with its name.
        self._per_text = runs_per_text(quantization.value if quantization else None)
        options = session_options(ort, threads)
        with _checked_graph(manifest, graph) as source:
            try:
                self.session = ort.InferenceSession(
                    source, options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # InvalidProtobuf, Fail: a graph onnxruntime cannot run
                raise MalformedModelError(
                    f"onnxruntime cannot load {self.folder / graph} ({type(exc).__name__}: "
                    f"{exc}); {manifest.fix()}"
                ) from None
        outputs = [o.name for o in self.session.get_outputs()]
        self._inputs = [i.name for i in self.session.get_inputs()]
        if outputs != [_OUTPUT] or self._inputs != inputs:
            raise MalformedModelError(
                f"{self.folder / graph} computes {outputs} from {self._inputs}, not {_OUTPUT} "
                f"from {inputs}; {manifest.fix()}"
            )

    @property
    def contract(self) -> EmbeddingContract:
        """The contract the export was made under."""
        return self.manifest.contract

    @property
    def dimension(self) -> int:
        """What the network emits after its dense heads."""
        return int(self.dense[-1].weight.shape[1]) if self.dense else self.hidden_size

    def encode(
        self, texts: Sequence[str], max_tokens: int, *, with_tokens: bool = False
    ) -> TokenBatch:
        encodings, arrays = self.tokenizer(texts, max_tokens)
        if self._per_text:
            hidden = run_per_text(self.session, _OUTPUT, arrays, self._inputs)
        else:
            (out,) = self.session.run([_OUTPUT], {k: arrays[k] for k in self._inputs})
            hidden = np.asarray(out, dtype=np.float32)
        return token_batch(encodings, arrays, hidden, with_tokens)


@contextlib.contextmanager
def _checked_graph(manifest: ExportManifest, name: str) -> Iterator[bytes | str]:
    """What onnxruntime loads: the graph, proven to be the one the manifest lists.

    Checked by one open file, never by its name alone (the name may be pointed at another
    file between the check and the load). Where the process can name its open files
    (``/proc/self/fd``), onnxruntime reads that very file, and the file is checked not to
    have changed until the session holds it: a copy of the graph in Python's memory is
    avoided, which is most of an export's peak memory (300 MB against 190 MB for MiniLM).
    Elsewhere the bytes are read once, checked and handed over.
    """
    path = manifest.folder / name
    expected = manifest.data["files"].get(name)
    if expected is None or not Path("/proc/self/fd").is_dir():
        yield manifest.read(name)
        return
    try:
        fh = path.open("rb")
    except OSError:
        yield manifest.read(name)  # refused there, with the reason
        return
    with fh:
        before = os.fstat(fh.fileno())
        try:
            (digest,) = file_digests([path])
            now = path.stat()
        except OSError:
            digest, now = "", before
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not _unchanged(
            before, now
        ):
            digest = _stream_digest(fh)  # the name moved meanwhile: hash what is open
        if digest != expected:
            yield manifest.read(name)  # refused there, naming the file and the fix
            return
        yield f"/proc/self/fd/{fh.fileno()}"
        if not _unchanged(before, os.fstat(fh.fileno())):
            raise MalformedModelError(
                f"{path} was written to while it was loaded; {manifest.fix()}"
            )


def _unchanged(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns) == (b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def _stream_digest(fh: Any) -> str:
    h = hashlib.sha256()
    fh.seek(0)
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _tokenizer_arrays(encoder: ExportEncoder) -> set[str]:
    names = {"input_ids", "attention_mask"}
    if "token_type_ids" in encoder.tokenizer.model_input_names:
        names.add("token_type_ids")
    return names


def _dense_head(manifest: ExportManifest, index: int, head: Any) -> DenseHead:
    """Dense head ``index`` of the export, from its ``.npy`` files (never a pickle)."""
    where = f"{manifest.folder}: dense head {index}"
    if not isinstance(head, Mapping) or not isinstance(head.get("weight"), str):
        raise MalformedModelError(f"{where} is not described in the manifest; {manifest.fix()}")
    arrays: list[Any] = []
    for key in ("weight", "bias"):
        name = head.get(key)
        if name is None:
            arrays.append(None)
            continue
        try:
            arrays.append(np.load(io.BytesIO(manifest.read(str(name))), allow_pickle=False))
        except (ValueError, OSError) as exc:
            raise MalformedModelError(f"{where}: {name} is not an array ({exc})") from None
    return DenseHead.from_arrays(arrays[0], arrays[1], head.get("activation"), where)


def _check_tokenizer_of_weights(tokenizer: Tokenizer, manifest: ExportManifest) -> None:
    """An export's tokenizer must be the one of the weights its contract names.

    The manifest proves each file is the one exported, unless it was rewritten with the file: a
    vocabulary edited where no canary probe looks changes only the texts that hold the pieces,
    under the same contract. Where this machine kept the tokenizer of those weights (the ONNX
    backend keeps it under their digest, which covers the model folder's tokenizer files), the
    two vocabularies must be the same; elsewhere the stored records an open samples are what
    can tell (:mod:`ctxemb_core.verified` keys its records by the export's files).

    Raises:
        MalformedModelError: the vocabularies differ (a few differing pieces named).
    """
    from ctxemb_core.backends.onnx_cache import tokenizer_dir

    weights = manifest.contract.weights
    kept = kept_tokenizer(tokenizer_dir(weights))
    if kept is None:
        return
    mine, theirs = vocabulary(tokenizer), vocabulary(kept)
    if mine == theirs:
        return
    differ = sorted(p for p in set(mine) | set(theirs) if mine.get(p) != theirs.get(p))
    shown = ", ".join(repr(p) for p in differ[:5]) + (" …" if len(differ) > 5 else "")
    raise MalformedModelError(
        f"{manifest.folder}: its tokenizer is not the one of the weights it names "
        f"({weights[:19]}…): {len(differ)} pieces differ from the tokenizer read from the model "
        f"folder of those weights ({shown}). The tokenizer was changed and the manifest "
        f"rewritten to match; it is not served. {manifest.fix().capitalize()}"
    )


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(
            f"serving a ctxemb export needs onnxruntime ({exc}); pip install onnxruntime"
        ) from None
    return onnxruntime
