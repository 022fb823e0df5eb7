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
refused with :class:`~ctxemb_core.errors.MalformedModelError` naming it and the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._files import file_digests, read_with_digest
from ctxemb_core.backends import TokenBatch
from ctxemb_core.backends._tokenize import Tokenizer, token_batch
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import (
    CtxembError,
    InvalidInputError,
    MalformedModelError,
    MissingDependencyError,
    ModelNotFoundError,
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

#: The manifest's file name; a folder holding it is an export.
MANIFEST = "ctxemb-export.json"
#: The contract's file name inside an export.
CONTRACT_FILE = "contract.json"
#: What the manifest's ``format`` says, and the version of the layout this module reads.
EXPORT_FORMAT = "ctxemb-export"
EXPORT_VERSION = 1
# A manifest is a few kilobytes; anything this large is not one.
_MAX_MANIFEST = 1 << 20
_OUTPUT = "last_hidden_state"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def is_export(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder holding a ctxemb export's manifest (not yet verified)."""
    try:
        return (Path(path) / MANIFEST).is_file()
    except (OSError, ValueError):
        return False


def _fix(folder: Path, model: str | None) -> str:
    return f"make it again: ctxemb export {model or 'MODEL'} {folder} --overwrite"


@dataclass(frozen=True)
class ExportManifest:
    """A manifest read and checked for shape, with the contract it names (digest verified).

    Attributes:
        folder: the export's folder.
        data: the manifest as read.
        contract: the contract of ``contract.json``, whose fingerprint the manifest records.
    """

    folder: Path
    data: dict[str, Any]
    contract: EmbeddingContract

    @property
    def files(self) -> dict[str, str]:
        return dict(self.data["files"])

    def fix(self) -> str:
        """The command that makes this export again."""
        return _fix(self.folder, self.contract.model)

    def read(self, name: str) -> bytes:
        """The bytes of one listed file, proven to have the manifest's sha256.

        Raises:
            MalformedModelError: the file is not listed, missing, unreadable or another file.
        """
        expected = self.data["files"].get(name)
        if expected is None:
            raise MalformedModelError(f"{self.folder}: the manifest lists no {name}; {self.fix()}")
        return _read_checked(self.folder, name, expected, self.contract.model)


def _read_checked(folder: Path, name: str, expected: str, model: str | None) -> bytes:
    try:
        data, digest = read_with_digest(folder / name)
    except FileNotFoundError:
        raise MalformedModelError(
            f"{folder / name} is missing from the export; {_fix(folder, model)}"
        ) from None
    except OSError as exc:
        raise MalformedModelError(
            f"{folder / name} cannot be read ({exc}); {_fix(folder, model)}"
        ) from None
    if digest != expected:
        raise MalformedModelError(
            f"{folder / name} is not the file that was exported (sha256 {digest[:12]}…, the "
            f"manifest says {expected[:12]}…): it was changed, truncated or replaced, and is not "
            f"served; {_fix(folder, model)}"
        )
    return data


def read_manifest(folder: str | os.PathLike[str]) -> ExportManifest:
    """Read an export's manifest and its contract, each checked.

    Raises:
        ModelNotFoundError: ``folder`` is not an export (no manifest).
        MalformedModelError: the manifest cannot be read, is of another format or version, or
            ``contract.json`` is not the file it lists or not the contract it fingerprints.
    """
    folder = Path(folder).expanduser().resolve()
    file = folder / MANIFEST
    if not file.is_file():
        raise ModelNotFoundError(
            f"{folder} is not a ctxemb export (no {MANIFEST}); make one with ctxemb export "
            f"MODEL {folder}"
        )
    try:
        with file.open("rb") as fh:
            raw = fh.read(_MAX_MANIFEST + 1)
        if len(raw) > _MAX_MANIFEST:
            raise ValueError(f"larger than {_MAX_MANIFEST:,} bytes")
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        raise MalformedModelError(
            f"{file} cannot be read as an export manifest ({exc}); {_fix(folder, None)}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise MalformedModelError(f"{file} is not a ctxemb export manifest; {_fix(folder, None)}")
    model = data.get("model") if isinstance(data.get("model"), str) else None
    if data.get("version") != EXPORT_VERSION:
        raise MalformedModelError(
            f"{file} is of export version {data.get('version')!r}; this ctxemb reads version "
            f"{EXPORT_VERSION}. {_fix(folder, model).capitalize()}"
        )
    files = data.get("files")
    if (
        not isinstance(files, dict)
        or not all(
            isinstance(n, str)
            and n == Path(n).name
            and not n.startswith(".")
            and n != MANIFEST
            and isinstance(d, str)
            for n, d in files.items()
        )
        or CONTRACT_FILE not in files
    ):
        raise MalformedModelError(f"{file} lists no valid files; {_fix(folder, model)}")
    text = _read_checked(folder, CONTRACT_FILE, files[CONTRACT_FILE], model)
    try:
        contract = EmbeddingContract.from_json(text)
    except CtxembError as exc:
        raise MalformedModelError(
            f"{folder / CONTRACT_FILE} is not a valid contract ({exc}); {_fix(folder, model)}"
        ) from None
    if data.get("fingerprint") != contract.fingerprint:
        raise MalformedModelError(
            f"{file} records the fingerprint {str(data.get('fingerprint'))[:12]}…, but "
            f"{CONTRACT_FILE} has {contract.fingerprint[:12]}…; {_fix(folder, contract.model)}"
        )
    return ExportManifest(folder, data, contract)


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
        from ctxemb_core.backends.onnx import check_threads

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
        missing = [n for n in inputs if n != "input_ids" and n not in _tokenizer_arrays(self)]
        if missing:
            raise MalformedModelError(
                f"{where}: the graph takes {missing}, which the tokenizer does not give; "
                f"{manifest.fix()}"
            )
        self.dense = tuple(_dense_head(manifest, i, h) for i, h in enumerate(heads))
        ort = _import_onnxruntime()
        from ctxemb_core.backends.onnx import runs_per_text, session_options

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
        from ctxemb_core.backends.onnx import run_per_text

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


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(
            f"serving a ctxemb export needs onnxruntime ({exc}); pip install onnxruntime"
        ) from None
    return onnxruntime
