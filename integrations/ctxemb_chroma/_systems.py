"""Chroma's in-process systems: one per folder, whatever spelling of its path opens it."""

from __future__ import annotations

import os
import weakref
from typing import Any

from ctxemb_core.errors import InvalidInputError

#: The real folder each embedded system was opened on (its name may be relative: a ``chdir``).
_OPENED_ON: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

#: Chroma's embedded implementations (its systems of any other kind are servers' clients).
_EMBEDDED = ("chromadb.api.segment.SegmentAPI", "chromadb.api.rust.RustBindingsAPI")


def shared_system(path: str) -> tuple[str, Any]:
    """The spelling of ``path`` whose system is open on its folder, and its settings (``None``:
    none; ``docs/chroma.md``, "Several processes on one folder")."""
    from chromadb.api.shared_system_client import SharedSystemClient

    real = os.path.realpath(os.path.expanduser(path))
    systems = dict(SharedSystemClient._identifier_to_system)
    for identifier, system in systems.items():
        settings = system.settings
        embedded = settings.is_persistent and settings.chroma_api_impl in _EMBEDDED
        if embedded and _OPENED_ON.get(system, os.path.realpath(identifier)) == real:
            return identifier, settings
    # This name is another folder's system (opened before a chdir): named absolutely instead.
    return (real if path in systems else path), None


def joinable(system_settings: Any, given: Any, path: str) -> Any:
    """Settings that join the system open on ``path``: its own, which must equal ``given``."""
    joined = system_settings.model_copy()
    if given is not None:
        given = given.model_copy(update={"persist_directory": path, "is_persistent": True})
        if given != joined:
            differ = sorted(
                k for k in type(joined).model_fields if getattr(given, k) != getattr(joined, k)
            )
            raise InvalidInputError(
                f"a Chroma client of {path!r} is already open in this process with other "
                f"settings ({', '.join(differ)} differ); open the folder with the same settings "
                "or none (they are then that client's)"
            )
    return joined


def opened_on(client: Any, path: str) -> None:
    """Record the real folder ``client``'s system was opened on (kept across a ``chdir``)."""
    _OPENED_ON.setdefault(client._system, os.path.realpath(path))
