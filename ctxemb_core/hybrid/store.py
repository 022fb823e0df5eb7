"""The lexical side on disk: a folder of file sets, each with a manifest, one of them current.

```
FOLDER/
  current                  {"version": "v-…"}: replaced atomically (os.replace) after a version
                           is complete, so a reader sees the old set or the new one, never half
  v-<16 hex>/
    manifest.json          the hybrid stamp: the fitted HybridContract (JSON) and its
                           fingerprint, the analyzer canary, the corpus state (ids and text
                           digests), the document count, and each file's sha256
    documents.json         [[id, text digest], ...] in posting order
    vocabulary.json        the terms, sorted
    postings.npz           indptr, postings, frequencies, lengths
```

:func:`save_lexical` writes a new version beside the current one and then moves ``current``; an
interrupted save leaves the previous version current (and a stray folder that the next save
removes). :func:`load_lexical` checks every file's digest and the manifest against itself; any
disagreement is a :class:`~ctxemb_core.errors.DamagedStampError`, never a pass.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core._files import sha256_file
from ctxemb_core.errors import DamagedStampError, DataFormatError, MissingStampError
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.index import LexicalIndex

__all__ = ["HybridStamp", "lexical_exists", "load_lexical", "save_lexical"]

STORE_SCHEMA = 1
FILES = ("documents.json", "vocabulary.json", "postings.npz")
CURRENT = "current"


@dataclass(frozen=True)
class HybridStamp:
    """What a hybrid index remembers beside its dense stamp (see the module docstring)."""

    contract: HybridContract
    analyzer_canary: str
    state: str
    count: int
    version: str

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint


def stored_version(folder: str | os.PathLike[str]) -> Any:
    """The version the folder's ``current`` pointer names: one small file read. None where it
    cannot be read (:func:`load_lexical` then says what is wrong)."""
    try:
        return json.loads((Path(folder) / CURRENT).read_text(encoding="utf-8"))["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def lexical_exists(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a lexical side (a ``current`` pointer)."""
    return (Path(folder) / CURRENT).is_file()


def save_lexical(
    folder: str | os.PathLike[str], index: LexicalIndex, contract: HybridContract
) -> HybridStamp:
    """Write ``index`` as the folder's new current version, stamped with ``contract``.

    ``contract.lexical`` must be the index's fitted contract (the caller builds the hybrid
    contract from it). Returns the stamp written.
    """
    folder = Path(folder)
    if contract.lexical != index.contract:
        raise DataFormatError(
            "the hybrid contract's lexical side is not the index's fitted contract; build it "
            "with contract.with_(lexical=index.contract)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    version = "v-" + uuid.uuid4().hex[:16]
    work = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder))
    try:
        _write_json(
            work / "documents.json", [list(p) for p in zip(index.ids, index.digests, strict=True)]
        )
        _write_json(work / "vocabulary.json", index.vocabulary)
        buffer = io.BytesIO()
        np.savez(buffer, **index.arrays())  # type: ignore[arg-type]
        _write_bytes(work / "postings.npz", buffer.getvalue())
        stamp = HybridStamp(contract, index.analyzer.canary(), index.state, len(index), version)
        manifest = {
            "schema": STORE_SCHEMA,
            "contract": contract.to_json(),
            "fingerprint": contract.fingerprint,
            "analyzer_canary": stamp.analyzer_canary,
            "state": stamp.state,
            "count": stamp.count,
            "files": {name: sha256_file(work / name) for name in FILES},
        }
        _write_json(work / "manifest.json", manifest)
        os.rename(work, folder / version)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    pointer = folder / f".{CURRENT}.{uuid.uuid4().hex[:8]}"
    _write_bytes(pointer, json.dumps({"version": version}).encode())
    os.replace(pointer, folder / CURRENT)
    _fsync_dir(folder)
    for old in folder.iterdir():
        if old.name != version and old.is_dir() and old.name.startswith(("v-", ".writing-")):
            shutil.rmtree(old, ignore_errors=True)
    return stamp


def read_stamp(folder: str | os.PathLike[str]) -> tuple[HybridStamp, Path]:
    """The current version's stamp and folder (files not read).

    Raises:
        MissingStampError: no lexical side in ``folder``.
        DamagedStampError: the pointer or manifest cannot be read or contradicts itself.
    """
    folder = Path(folder)
    try:
        pointer = json.loads((folder / CURRENT).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingStampError(
            f"{folder} holds no lexical index (no '{CURRENT}'); build it with ctxemb index --hybrid"
        ) from None
    except (OSError, ValueError) as exc:
        raise DamagedStampError(
            f"the lexical index pointer {folder / CURRENT} is damaged: {exc}"
        ) from None
    version = pointer.get("version") if isinstance(pointer, dict) else None
    if not isinstance(version, str) or not version.startswith("v-") or "/" in version:
        raise DamagedStampError(f"the lexical index pointer {folder / CURRENT} is damaged")
    where = folder / version
    try:
        manifest = json.loads((where / "manifest.json").read_text(encoding="utf-8"))
        contract = HybridContract.from_json(manifest["contract"])
        stamp = HybridStamp(
            contract, manifest["analyzer_canary"], manifest["state"], manifest["count"], version
        )
        files = manifest["files"]
        if manifest["schema"] != STORE_SCHEMA:
            raise ValueError(f"schema {manifest['schema']!r} is not {STORE_SCHEMA}")
        if manifest["fingerprint"] != contract.fingerprint:
            raise ValueError("the fingerprint is not the contract's")
        if sorted(files) != sorted(FILES):
            raise ValueError(f"files {sorted(files)} are not {sorted(FILES)}")
    except FileNotFoundError:
        raise DamagedStampError(f"the lexical index {where} has no manifest") from None
    except (OSError, ValueError, KeyError, TypeError, DataFormatError) as exc:
        raise DamagedStampError(
            f"the lexical index manifest in {where} is damaged: {exc}"
        ) from None
    return stamp, where


def load_lexical(folder: str | os.PathLike[str]) -> tuple[LexicalIndex, HybridStamp]:
    """The current lexical index of ``folder`` and its stamp, every file's digest checked."""
    stamp, where = read_stamp(folder)
    manifest = json.loads((where / "manifest.json").read_text(encoding="utf-8"))
    for name, digest in manifest["files"].items():
        try:
            found = sha256_file(where / name)
        except OSError:
            raise DamagedStampError(f"the lexical index {where} lacks {name}") from None
        if found != digest:
            raise DamagedStampError(
                f"{where / name} is not the file its manifest records (sha256 {found} != "
                f"{digest}): changed after it was written; rebuild with ctxemb index --hybrid"
            )
    try:
        documents = json.loads((where / "documents.json").read_text(encoding="utf-8"))
        vocabulary = json.loads((where / "vocabulary.json").read_text(encoding="utf-8"))
        with np.load(where / "postings.npz", allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in ("indptr", "postings", "frequencies", "lengths")}
        index = LexicalIndex.from_parts(stamp.contract.lexical, documents, vocabulary, arrays)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise DamagedStampError(f"the lexical index in {where} cannot be read: {exc}") from None
    if len(index) != stamp.count or index.state != stamp.state:
        raise DamagedStampError(f"the lexical index in {where} contradicts its manifest")
    return index, stamp


def _write_json(path: Path, value: Any) -> None:
    _write_bytes(
        path,
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass"
        ),
    )


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
