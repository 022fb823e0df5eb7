"""What an open remembers of a collection it verified: the ids of the state that passed.

An open re-embeds a sample of stored records to prove the index holds this contract's vectors.
Doing that again on every open of an unchanged collection proves nothing new (the same records,
drawn again) and costs a cold query about as much as the query itself. So when an open's checks
pass, ctxemb keeps a *verification record*: a small JSON file in its cache folder
(``$CTXEMB_CACHE_DIR/verified/``), never in the store (a reader does not write into the index),
keyed by identities, not names (:func:`record_key`): the store, what the index *is* there (a
Chroma collection's id, a PostgreSQL table's oid, never its name: an index dropped and made again
under its name, stamp copied, is another index), the stamp and the store's own setting, the
caller's contract fingerprint and the encoder's files (:attr:`Embedder.identity`: an export with
an edited tokenizer and a manifest rewritten to match has the contract of a clean copy, not its
files). It holds the collection's ids in the store's order.

The next open under the same key reads the ids (one ``get(include=[])``: ~7 ms embedded, ~70 ms
on a server for SciFact's 5,183 records) and compares:

- no id new and none moved: no stored record is re-embedded (the stamp, the configuration and
  the canary of the caller's encoder are still checked in full, every time);
- otherwise the changed records (ids not in the record, and ids that moved — Chroma puts a
  record deleted and added again at the end) are checked first, then the usual random sample
  fills the rest; a foreign vector among them is refused as before. The record is then renewed
  with the ids just read.

What the record cannot see, written by a client that bypasses ctxemb: a record rewritten *in
place* under its id (``update``/``upsert`` keep a record's position and the count), and records
deleted and written again that were the newest of the verified state, in their order (they land
where they were). Seeing those would mean reading every stored vector on each open (0.5-1.3 s
embedded, 2.4 s on a server for SciFact: more than the sample it saves). An open without a
record finds such a record with the sample's probability
(:func:`~ctxemb_core.guard.detection_probability`: 16 of N for one record); with a record, the
opens after a verified one do not draw again. ``verify`` never uses records (``verify --all``
re-embeds everything), nor does ``sample=0``, which checks no stored record.

A record is trusted as far as the cache folder is: one that cannot be read, is of another
version or key, or whose checksum does not match (damaged, or edited by hand) is ignored and the
open samples as if there were none. At worst a forged record lists ids whose records it skips,
which is what ``--sample 0`` skips; it can never make a check pass that the stamp or canary fails.

A store that keeps a write mark (:meth:`~ctxemb_core.index.driver.StoreDriver.changes`) needs
only the mark the verified state had: the next open asks the store for the ids written after it.
That record (:func:`save_mark`, :func:`load_mark`) is one number, a few hundred bytes whatever the
index holds, so unlike the id list it is kept above :data:`MAX_RECORDED`. It is kept beside the id
record of the same key (another file), and trusted as far as the cache folder is, as that one.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxemb_core._files import cache_dir, write_atomic
from ctxemb_core.records import sample_ranges

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder

__all__ = [
    "MARK_SCHEMA",
    "MAX_RECORDED",
    "VERIFIED_SCHEMA",
    "OpenCheck",
    "changed_ids",
    "load_mark",
    "load_verified",
    "plan_sample",
    "record_key",
    "record_path",
    "save_mark",
    "save_verified",
]

#: Version of the record's layout.
VERIFIED_SCHEMA = 1
#: Version of the mark record's layout.
MARK_SCHEMA = 1
#: Collections above this many records are sampled on every open, as before: the id list read
#: on each open and kept in the record grows with the collection.
MAX_RECORDED = 200_000
# Salts the checksum, so that no other use of BLAKE2b makes a matching one by accident.
_PERSON = b"ctxemb-verified1"
_MARK_PERSON = b"ctxemb-marked1"


@dataclass(frozen=True)
class OpenCheck:
    """What an open checked of the stored records (``GuardedCollection.open_check``).

    Attributes:
        records: how many records the collection held when it was opened (``None`` with
            ``sample=0``: not read).
        checked: stored records re-embedded and compared on this open.
        changed: records new or moved since the collection's last verification under this
            contract, or ``None`` when no verification record was used (none, another
            contract's, damaged, or ``sample=0``).
    """

    records: int | None
    checked: int
    changed: int | None = None

    @property
    def reused(self) -> bool:
        """Whether a verification record spared re-embedding the unchanged records."""
        return self.changed is not None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def record_key(store: str, index: str, embedder: Embedder, **state: str) -> dict[str, str]:
    """The key a verification record is kept under.

    Args:
        store: which store (a server's address, an embedded store's folder).
        index: what the index *is* in the store: an identity that a drop and a create under
            the same name changes (a collection's id, a table's oid), never its name alone.
        embedder: the caller's embedder: its contract's fingerprint and the identity of the
            files it loaded (:attr:`~ctxemb_core.embedder.Embedder.identity`).
        state: anything else whose change makes the record another's (the stamp's digest, the
            store's persisted embedding setting, the vector column).
    """
    return {
        **{k: str(v) for k, v in state.items()},
        "store": store,
        "index": index,
        "fingerprint": embedder.contract.fingerprint,
        "encoder": hashlib.sha256(embedder.identity.encode()).hexdigest(),
    }


def record_path(key: Mapping[str, Any]) -> Path:
    """Where the record of ``key`` is kept (one small file per store, collection and contract)."""
    name = hashlib.sha256(_canonical(dict(key)).encode()).hexdigest()[:40]
    return cache_dir() / "verified" / f"{name}.json"


def _checksum(key: Mapping[str, Any], ids: Sequence[str]) -> str:
    body = _canonical({"schema": VERIFIED_SCHEMA, "key": dict(key), "ids": list(ids)})
    return hashlib.blake2b(body.encode(), digest_size=32, person=_PERSON).hexdigest()


def load_verified(key: Mapping[str, Any]) -> list[str] | None:
    """The ids of the last verified state under ``key``, or ``None`` (no usable record)."""
    try:
        data = json.loads(record_path(key).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != VERIFIED_SCHEMA:
        return None
    ids = data.get("ids")
    if (
        data.get("key") != _canonical(dict(key))
        or not isinstance(ids, list)
        or not all(isinstance(i, str) for i in ids)
        or data.get("checksum") != _checksum(key, ids)
    ):
        return None
    return ids


def save_verified(key: Mapping[str, Any], ids: Sequence[str]) -> bool:
    """Remember that the state of ``ids`` passed an open's checks; whether it was written.

    Written whole or not at all (a read-only cache folder only costs the next open's speed).
    """
    if len(ids) > MAX_RECORDED:
        return False
    ids = list(ids)
    record = {
        "schema": VERIFIED_SCHEMA,
        "key": _canonical(dict(key)),
        "ids": ids,
        "checksum": _checksum(key, ids),
    }
    return write_atomic(record_path(key), json.dumps(record))


def changed_ids(ids: Sequence[str], verified: Sequence[str]) -> list[str]:
    """The ids of ``ids`` (the store's order now) that are not where ``verified`` had them.

    New ids, and ids that moved behind one that came after them (a record deleted and written
    again goes to the end); deleted ids need no check. In the current order.
    """
    position = {i: k for k, i in enumerate(verified)}
    out: list[str] = []
    highest = -1
    for i in ids:
        k = position.get(i)
        if k is None or k < highest:
            out.append(i)
        else:
            highest = k
    return out


def plan_sample(
    ids: Sequence[str],
    verified: Sequence[str] | None,
    size: int,
    unproven: Collection[str] = (),
) -> tuple[list[str], int | None]:
    """Which stored records an open re-embeds, and how many changed since ``verified``.

    Without a record: the newest half and a random half of ``size`` (as every open samples).
    With one: nothing when nothing changed; else the changed records first (the newest half and
    a random half of them when there are more than ``size``), then random others up to ``size``.
    ``unproven``: ids that count as changed whatever their place (a record whose seal does not
    hold: a write around ctxemb need not move it, the last record's or an unsealed one's).
    """
    if size <= 0 or not ids:
        return [], None if verified is None else 0
    if verified is None:
        return [i for a, b in sample_ranges(len(ids), size) for i in ids[a:b]], None
    changed = changed_ids(ids, verified)
    if unproven:
        seen = set(changed).union(unproven)
        changed = [i for i in ids if i in seen]
    if not changed:
        return [], 0
    if len(changed) > size:
        chosen = [i for a, b in sample_ranges(len(changed), size) for i in changed[a:b]]
        return chosen, len(changed)
    moved = set(changed)
    rest = [i for i in ids if i not in moved]
    return changed + random.sample(rest, min(len(rest), size - len(changed))), len(changed)


# -- the record of a store that keeps a write mark --------------------------------------------


def _mark_key(key: Mapping[str, Any]) -> dict[str, Any]:
    return {**key, "record": "mark"}  # another file than the same key's id record


def _mark_checksum(key: Mapping[str, Any], mark: int) -> str:
    body = _canonical({"schema": MARK_SCHEMA, "key": dict(key), "mark": mark})
    return hashlib.blake2b(body.encode(), digest_size=32, person=_MARK_PERSON).hexdigest()


def load_mark(key: Mapping[str, Any]) -> int | None:
    """The write mark of the last verified state under ``key``, or ``None`` (no usable record)."""
    full = _mark_key(key)
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
        or data.get("checksum") != _mark_checksum(full, mark)
    ):
        return None
    return mark


def save_mark(key: Mapping[str, Any], mark: int) -> bool:
    """Remember that the index's state up to write mark ``mark`` passed an open's checks."""
    full = _mark_key(key)
    record = {
        "schema": MARK_SCHEMA,
        "key": _canonical(full),
        "mark": mark,
        "checksum": _mark_checksum(full, mark),
    }
    return write_atomic(record_path(full), json.dumps(record))
