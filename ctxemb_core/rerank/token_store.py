"""The token-vector store: document token vectors kept on disk under a reranker contract.

Each document's vectors are one file (a magic line, a JSON header with the contract's
fingerprint, the document id, the text's digest, shape, dtype and the data's sha256, then the
raw array), so vectors made under one contract are never served to another and a file that
changed on disk is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core.contract import same_contract
from ctxemb_core.errors import (
    DataFormatError,
    InvalidInputError,
    StoreUnavailableError,
)
from ctxemb_core.rerank.contract import (
    RerankerContract,
    RerankKind,
)
from ctxemb_core.rerank.kernels import check_finite, token_matrix
from ctxemb_core.validate import check_texts

__all__ = ["TokenVectorStore", "check_token_vectors"]

# -- the token vector store --------------------------------------------------------------------

_MAGIC = b"ctxemb-token-vectors 1\n"
_HEADER_KEYS = frozenset({"fingerprint", "id", "text_sha256", "shape", "dtype", "sha256"})
_CONTRACT_FILE = "contract.json"
_SUFFIX = ".tokens"


class _Entry(NamedTuple):
    vectors: np.ndarray
    text_sha256: str | None


class TokenVectorStore:
    """Document token vectors, keyed by reranker contract fingerprint and document id.

    Vectors made under one :class:`~ctxemb_core.rerank.RerankerContract` are kept apart from
    any other's: every lookup goes through the caller's contract fingerprint, so a changed
    contract (another encoder, skip rule, marker, normalisation) finds nothing and computes
    afresh; it can never read stale vectors. Each entry may record the sha256 of its document's
    text: a lookup given the texts serves only entries whose text is unchanged.

    In memory by default; with ``directory``, persisted as::

        directory/<fingerprint>/contract.json            the contract (its JSON)
        directory/<fingerprint>/<h[:2]>/<h>.tokens       one document, h = sha256(id)

    Each file is written atomically (a temporary file renamed over it) and records the
    fingerprint, id, text digest, shape and a sha256 of its vectors; a file that disagrees
    with where it lies or with itself is refused with a
    :class:`~ctxemb_core.errors.DataFormatError`, never served.

    Args:
        directory: where to persist the vectors; ``None`` keeps them in memory.

    Raises:
        StoreUnavailableError: the directory cannot be created.

    Example:
        >>> store = TokenVectorStore("./token-vectors")
        >>> store.put(contract, ["doc-1"], [vectors])  # doctest: +SKIP
        >>> store.get(contract, ["doc-1", "doc-2"])  # doctest: +SKIP
        [array([[...]], dtype=float32), None]
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        self._memory: dict[str, dict[str, _Entry]] = {}
        self._checked: set[str] = set()
        self._lock = threading.Lock()
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailableError(
                    f"cannot use {self.directory} for token vectors: {exc.strerror or exc}"
                ) from None

    def __repr__(self) -> str:
        where = "memory" if self.directory is None else str(self.directory)
        return f"TokenVectorStore({where})"

    # -- reading -------------------------------------------------------------------------------

    def get(
        self,
        contract: RerankerContract,
        ids: Sequence[str],
        *,
        texts: Sequence[str] | None = None,
    ) -> list[np.ndarray | None]:
        """The stored vectors of each id under ``contract`` (``None`` where there are none).

        Args:
            contract: the late-interaction contract the vectors must have been made under.
            ids: document ids.
            texts: each document's text; an entry recorded for another text (or none) is
                not served (``None``).

        Raises:
            DataFormatError: a persisted file that is damaged or does not belong where it
                lies (delete it, or :meth:`clear` the contract, to compute it again).
        """
        fp, width = _late(contract)
        keys = check_texts(ids, "ids", single="wrap a single id in a list")
        digests = self._digests(texts, len(keys))
        out: list[np.ndarray | None] = []
        for i, key in enumerate(keys):
            entry = self._read(contract, fp, width, key)
            wanted = None if digests is None else digests[i]
            if entry is None or (wanted is not None and entry.text_sha256 != wanted):
                out.append(None)
            else:
                out.append(entry.vectors)
        return out

    def __contains__(self, key: object) -> bool:
        """``(contract, id) in store``: whether vectors are stored for the id under it."""
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        contract, doc_id = key
        if not isinstance(contract, RerankerContract) or not isinstance(doc_id, str):
            return False
        fp = contract.fingerprint
        if self.directory is None:
            with self._lock:
                return doc_id in self._memory.get(fp, {})
        return self._path(fp, doc_id).is_file()

    def count(self, contract: RerankerContract) -> int:
        """How many documents have vectors under ``contract``."""
        fp, _ = _late(contract)
        if self.directory is None:
            with self._lock:
                return len(self._memory.get(fp, {}))
        folder = self.directory / fp
        return sum(1 for _ in folder.glob(f"*/*{_SUFFIX}")) if folder.is_dir() else 0

    # -- writing -------------------------------------------------------------------------------

    def put(
        self,
        contract: RerankerContract,
        ids: Sequence[str],
        vectors: Sequence[Any],
        *,
        texts: Sequence[str] | None = None,
    ) -> None:
        """Store each document's ``(tokens, dim)`` vectors under ``contract`` (replacing any).

        Args:
            contract: the late-interaction contract the vectors were made under.
            ids: document ids.
            vectors: one float array per id, of the contract's token width, finite.
            texts: each document's text, recorded (as a sha256) so a changed text is not
                served later.

        Raises:
            InvalidInputError: ids and vectors that do not pair, or vectors of another width,
                not 2-D, or not finite. Nothing is written.
            StoreUnavailableError: a file cannot be written.
        """
        fp, width = _late(contract)
        keys = check_texts(ids, "ids", single="wrap a single id in a list")
        digests = self._digests(texts, len(keys))
        arrays = check_token_vectors(vectors, len(keys), width, "vectors", own=True)
        if self.directory is None:
            with self._lock:
                bucket = self._memory.setdefault(fp, {})
                for i, (key, array) in enumerate(zip(keys, arrays, strict=True)):
                    bucket[key] = _Entry(array, None if digests is None else digests[i])
            return
        self._ensure_contract(contract, fp, create=True)
        for i, (key, array) in enumerate(zip(keys, arrays, strict=True)):
            header = {
                "fingerprint": fp,
                "id": key,
                "text_sha256": None if digests is None else digests[i],
                "shape": list(array.shape),
                "dtype": "<f4",
                "sha256": hashlib.sha256(array.astype("<f4").tobytes()).hexdigest(),
            }
            data = (
                _MAGIC
                + json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
                + b"\n"
                + array.astype("<f4").tobytes()
            )
            _write_atomic(self._path(fp, key), data)

    def clear(self, contract: RerankerContract) -> int:
        """Remove every vector stored under ``contract``; how many documents had some."""
        fp, _ = _late(contract)
        if self.directory is None:
            with self._lock:
                return len(self._memory.pop(fp, {}))
        folder = self.directory / fp
        if not folder.is_dir():
            return 0
        count = self.count(contract)
        # Renamed away first, so no reader ever sees half a removal.
        trash = self.directory / f".{fp}.{uuid.uuid4().hex}.removing"
        try:
            os.replace(folder, trash)
            shutil.rmtree(trash)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot clear {folder}: {exc.strerror or exc}") from None
        with self._lock:
            self._checked.discard(fp)
        return count

    # -- internals -----------------------------------------------------------------------------

    def _digests(self, texts: Sequence[str] | None, count: int) -> list[str] | None:
        if texts is None:
            return None
        values = check_texts(texts, "texts", single="wrap a single text in a list")
        if len(values) != count:
            raise InvalidInputError(f"texts has {len(values)} items for {count} ids")
        return [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in values]

    def _path(self, fp: str, key: str) -> Path:
        assert self.directory is not None
        h = hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.directory / fp / h[:2] / f"{h}{_SUFFIX}"

    def _read(self, contract: RerankerContract, fp: str, width: int, key: str) -> _Entry | None:
        if self.directory is None:
            with self._lock:
                return self._memory.get(fp, {}).get(key)
        path = self._path(fp, key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailableError(f"cannot read {path}: {exc.strerror or exc}") from None
        self._ensure_contract(contract, fp, create=False)
        return _decode(data, path, fp, key, width)

    def _ensure_contract(self, contract: RerankerContract, fp: str, *, create: bool) -> None:
        """The fingerprint's folder holds this contract's JSON (written by the first put)."""
        with self._lock:
            if fp in self._checked:
                return
        assert self.directory is not None
        file = self.directory / fp / _CONTRACT_FILE
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            if not create:
                raise DataFormatError(
                    f"{file.parent} holds token vectors but no {_CONTRACT_FILE}; the folder is "
                    "refused. Delete it (or TokenVectorStore.clear(contract)) to compute the "
                    "vectors again"
                ) from None
            _write_atomic(file, contract.to_json().encode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise DataFormatError(f"cannot read {file}: {exc}") from None
        else:
            try:
                stored = RerankerContract.from_json(text)
            except DataFormatError as exc:
                raise DataFormatError(f"{file} is not a reranker contract: {exc}") from None
            except Exception as exc:  # an invalid contract (InvalidContractError, …)
                raise DataFormatError(f"{file} is not a valid reranker contract: {exc}") from None
            if not same_contract(stored, fp, exact=True):
                raise DataFormatError(
                    f"{file} holds the contract {stored.fingerprint[:12]}…, not {fp[:12]}… its "
                    "folder is named for; the folder is refused. Delete it (or "
                    "TokenVectorStore.clear(contract)) to compute the vectors again"
                )
        with self._lock:
            self._checked.add(fp)


def _late(contract: Any) -> tuple[str, int]:
    """The fingerprint and token width of a late-interaction contract."""
    if not isinstance(contract, RerankerContract):
        raise InvalidInputError(
            f"a TokenVectorStore is keyed by a RerankerContract, got {type(contract).__name__}"
        )
    if contract.kind is not RerankKind.LATE_INTERACTION or contract.encoder is None:
        raise InvalidInputError(
            f"token vectors belong to a late_interaction contract, got kind={contract.kind.value!r}"
        )
    return contract.fingerprint, contract.encoder.dimension


def _decode(data: bytes, path: Path, fp: str, key: str, width: int) -> _Entry:
    """The entry in a token-vector file, or a DataFormatError saying what is wrong with it."""

    def refuse(why: str) -> DataFormatError:
        return DataFormatError(
            f"{path}: {why}; the file is refused, never served. Delete it (or "
            "TokenVectorStore.clear(contract)) and its vectors are computed again"
        )

    if not data.startswith(_MAGIC):
        raise refuse("not a ctxemb token-vector file")
    end = data.find(b"\n", len(_MAGIC))
    if end < 0:
        raise refuse("its header is cut off")
    try:
        header = json.loads(data[len(_MAGIC) : end])
    except (ValueError, RecursionError):
        raise refuse("its header is not JSON") from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        raise refuse(f"its header does not have the fields {sorted(_HEADER_KEYS)}")
    if not isinstance(header["fingerprint"], str) or not same_contract(
        header["fingerprint"], fp, exact=True
    ):
        raise refuse(
            f"it was written under the reranker contract {str(header['fingerprint'])[:12]}…, "
            f"not {fp[:12]}…"
        )
    if header["id"] != key:
        raise refuse(f"it holds the document {str(header['id'])[:80]!r}, not {key[:80]!r}")
    shape = header["shape"]
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(type(s) is int and s >= 0 for s in shape)
        or header["dtype"] != "<f4"
    ):
        raise refuse(f"its shape {shape!r} or dtype {header['dtype']!r} is not a token matrix")
    if shape[1] != width:
        raise refuse(f"its vectors are {shape[1]} wide; the contract's tokens are {width}")
    payload = data[end + 1 :]
    if len(payload) != shape[0] * shape[1] * 4:
        need = shape[0] * shape[1] * 4
        raise refuse(f"it holds {len(payload)} bytes of vectors where {shape} needs {need}")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise refuse("its vectors do not match their recorded sha256")
    text = header["text_sha256"]
    if text is not None and not isinstance(text, str):
        raise refuse("its text digest is not a string")
    vectors = np.frombuffer(payload, dtype="<f4").reshape(shape).astype(np.float32, copy=False)
    if not np.isfinite(vectors).all():
        raise refuse("its vectors hold NaN or infinite values")
    return _Entry(vectors, text)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise StoreUnavailableError(f"cannot write {path}: {exc.strerror or exc}") from None


def check_token_vectors(
    vectors: Any, count: int, width: int, name: str, *, own: bool = False
) -> list[np.ndarray]:
    """Token matrices as C-contiguous float32: one per document, ``width`` wide, finite; else
    :class:`InvalidInputError` naming the first bad one. ``own``: read-only copies."""
    if isinstance(vectors, (str, bytes)) or not isinstance(vectors, Sequence | np.ndarray):
        raise InvalidInputError(
            f"{name} must be a list of (tokens, {width}) arrays, one per document, got "
            f"{type(vectors).__name__}"
        )
    if len(vectors) != count:
        raise InvalidInputError(f"{name} has {len(vectors)} items for {count} documents")
    out = []
    for j, value in enumerate(vectors):
        array = token_matrix(value, f"{name}[{j}]")
        if array.shape[1] != width:
            raise InvalidInputError(
                f"{name}[{j}] has vectors of width {array.shape[1]}; this contract's token "
                f"vectors are {width} wide"
            )
        check_finite(array, f"{name}[{j}]")
        if own:
            array = array.copy()  # the caller's array stays theirs, and cannot change ours
            array.flags.writeable = False
        out.append(array)
    return out
