"""The manifest of a ctxemb export folder (``ctxemb-export.json``) and the contract it holds.

:func:`ctxemb_core.export.export_model` writes the folder; :func:`read_manifest` reads its
manifest and ``contract.json``, each checked (the contract's bytes against the manifest's
sha256, its fingerprint against the manifest's record), and :meth:`ExportManifest.read` hands
out any other listed file proven to have the manifest's sha256. The layout of the folder is
drawn in :mod:`ctxemb_core.backends.exported`, which serves it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core._files import read_with_digest
from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.errors import CtxembError, MalformedModelError, ModelNotFoundError

__all__ = [
    "CONTRACT_FILE",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "MANIFEST",
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
    if not same_contract(contract, str(data.get("fingerprint")), exact=True):
        raise MalformedModelError(
            f"{file} records the fingerprint {str(data.get('fingerprint'))[:12]}…, but "
            f"{CONTRACT_FILE} has {contract.fingerprint[:12]}…; {_fix(folder, contract.model)}"
        )
    return ExportManifest(folder, data, contract)
