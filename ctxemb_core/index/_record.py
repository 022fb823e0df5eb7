"""The verified-open record of a store that keeps a write mark: one number, at any size.

:mod:`ctxemb_core.verified` keeps the ids of the state that passed (what a store without a
write mark allows: the next open lists every id and compares). A store with a mark needs only
the mark the verified state had: the next open asks the store for the ids written after it
(:meth:`~ctxemb_core.index.driver.StoreDriver.changes`). The record is a few hundred bytes,
whatever the index holds, so unlike the id list it is kept above ``MAX_RECORDED``.

Kept beside the id records (same folder, same key, trusted as far as the cache folder is; a
record that cannot be read or whose checksum does not match is ignored).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ctxemb_core._files import write_atomic
from ctxemb_core.verified import record_path

__all__ = ["MARK_SCHEMA", "load_mark", "save_mark"]

#: Version of the mark record's layout.
MARK_SCHEMA = 1
_PERSON = b"ctxemb-marked1"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _key(key: Mapping[str, Any]) -> dict[str, Any]:
    return {**key, "record": "mark"}  # another file than the same key's id record


def _checksum(key: Mapping[str, Any], mark: int) -> str:
    body = _canonical({"schema": MARK_SCHEMA, "key": dict(key), "mark": mark})
    return hashlib.blake2b(body.encode(), digest_size=32, person=_PERSON).hexdigest()


def load_mark(key: Mapping[str, Any]) -> int | None:
    """The write mark of the last verified state under ``key``, or ``None`` (no usable record)."""
    full = _key(key)
    try:
        data = json.loads(record_path(full).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MARK_SCHEMA:
        return None
    mark = data.get("mark")
    if (
        data.get("key") != _canonical(full)
        or isinstance(mark, bool)
        or not isinstance(mark, int)
        or data.get("checksum") != _checksum(full, mark)
    ):
        return None
    return mark


def save_mark(key: Mapping[str, Any], mark: int) -> bool:
    """Remember that the index's state up to write mark ``mark`` passed an open's checks."""
    full = _key(key)
    record = {
        "schema": MARK_SCHEMA,
        "key": _canonical(full),
        "mark": mark,
        "checksum": _checksum(full, mark),
    }
    return write_atomic(record_path(full), json.dumps(record))
