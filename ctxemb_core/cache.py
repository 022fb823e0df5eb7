"""A content-addressed on-disk cache of embedding vectors.

Re-indexing a corpus under an unchanged contract re-embeds texts whose vectors are already known.
The cache keeps them in one SQLite file, addressed by *what* was embedded and *how*:

    key   = (contract fingerprint, role, sha256 of the text as UTF-8)
    value = the contract's float vector (before the precision step), bit for bit

A vector is only ever returned for the exact fingerprint and role it was stored under, so a change
to any part of the contract is a miss, never a stale vector. Texts are hashed, never stored: the
file holds no document content (privacy) and each entry costs 32 bytes of key plus its vector.

Every row carries a checksum (64-bit BLAKE2b) over everything its vector's meaning depends on:
fingerprint, role, dtype, width, text hash and the vector bytes; the namespace row that records
the dtype and width carries its own. A flipped bit anywhere in them is a miss and a
:class:`CacheWarning`, never a wrong vector.

It is only a cache. A corrupt, unreadable or unwritable file, or one locked for too long by
another process, degrades to misses with a :class:`CacheWarning`; it never fails the embedding job
that uses it. Several processes may read and write one file at once (SQLite WAL mode, a busy
timeout and retries; every write is one transaction, so no reader sees half a batch).

The path may point at something that is not ours. The file is proven to be a ctxemb cache (its
SQLite header carries our ``application_id``) or to be new (absent, empty, or an SQLite file with
no schema at all) from its raw header bytes *before* SQLite opens it, so no pragma, journal
rollback or WAL sidecar ever touches anything else. Anything else (another program's database,
a file that is not SQLite, a directory, a symbolic link to anything but a file proven ours, a
cache whose header is damaged so that it can no longer be proven ours) is never modified nor
deleted: the cache is off with a :class:`CacheWarning`, and :meth:`EmbeddingCache.clear`
refuses with one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sqlite3
import stat
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ctxemb_core._files import cache_dir
from ctxemb_core.contract import Role
from ctxemb_core.errors import CtxembWarning, InvalidInputError
from ctxemb_core.validate import check_positive_int, check_text, check_texts

__all__ = ["CacheLookup", "CacheStats", "CacheWarning", "EmbeddingCache"]

T = TypeVar("T")

#: Version of the file's table layout (``PRAGMA user_version``). 2: checksums cover the
#: namespace's dtype and width, and the namespace row has its own.
CACHE_SCHEMA = 2
# 'ctxe': marks a file as ours, so a path pointing at someone else's database is left alone.
_APPLICATION_ID = 0x63747865
_SQLITE_MAGIC = b"SQLite format 3\x00"
# Salts the checksums, so that no other use of BLAKE2b can produce a matching row by accident.
_PERSON = b"ctxemb-cache-v2"
_DEFAULT_MAX_BYTES = 2 * 1024**3
_FILE_NAME = "embeddings.sqlite3"
# Below SQLite's historic limit of 999 bound parameters per statement.
_CHUNK = 900
_BUSY_TIMEOUT = 5.0
_ATTEMPTS = 4
# Evicting down to a low-water mark, not just under the bound, means a full cache evicts once
# per ~10% of new data instead of on every put.
_LOW_WATER = 0.9
# Hits are remembered in memory and written as one batch, so that reads stay read-only;
# recency is coarse by design (an LRU cache needs the order, not the instant).
_TOUCH_ROWS = 10_000
_TOUCH_SECONDS = 30.0
_VALID_ROLES = tuple(r.value for r in Role)
_FOREIGN_DATABASE = (
    "it is an SQLite database of another application (it lacks ctxemb's application_id)"
)
# SQLite result codes (low byte of the extended code).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_NOTADB = 5, 6, 11, 26

# `state` holds the logical clock and the byte and entry counts, which the write transactions
# keep themselves: triggers would do the same at four times the cost of an insert.
_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    clock INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    entries INTEGER NOT NULL
);
INSERT OR IGNORE INTO state (id, clock, bytes, entries) VALUES (0, 0, 0, 0);
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    role TEXT NOT NULL,
    dtype TEXT NOT NULL,
    dim INTEGER NOT NULL,
    checksum INTEGER NOT NULL,
    UNIQUE (fingerprint, role)
);
CREATE TABLE IF NOT EXISTS vectors (
    id INTEGER PRIMARY KEY,
    ns INTEGER NOT NULL,
    key BLOB NOT NULL,
    last_access INTEGER NOT NULL,
    checksum INTEGER NOT NULL,
    vector BLOB NOT NULL,
    UNIQUE (ns, key)
);
CREATE INDEX IF NOT EXISTS vectors_lru ON vectors (last_access);
"""


class CacheWarning(CtxembWarning):
    """The embedding cache could not be used for a call; the texts were treated as misses."""


class CacheLookup(NamedTuple):
    """The result of :meth:`EmbeddingCache.get_many`.

    Attributes:
        found: ``(len(texts),)`` bool, True where the text's vector was in the cache.
        vectors: ``(found.sum(), dim)``: the found vectors, in the order of the texts.
            With no hit at all its shape is ``(0, dim)``, or ``(0, 0)`` when nothing is stored
            under the fingerprint and role (or the file could not be read).
    """

    found: np.ndarray
    vectors: np.ndarray


@dataclass(frozen=True)
class CacheStats:
    """Counts of one cache: ``entries`` and ``bytes`` of the file, the rest of this instance.

    Attributes:
        entries: vectors in the file (all fingerprints and roles).
        bytes: their stored size (vector bytes plus 32-byte keys), kept at most ``max_bytes``.
        hits: texts this instance found.
        misses: texts this instance looked up and did not find.
        evicted: entries this instance evicted to stay under ``max_bytes``.
    """

    entries: int
    bytes: int
    hits: int
    misses: int
    evicted: int


@dataclass
class _Handle:
    # What the finalizer needs, kept apart from the cache so that it does not keep it alive.
    conn: sqlite3.Connection | None = None
    pid: int = 0
    pending: set[int] = field(default_factory=set)
    since: float = 0.0


class EmbeddingCache:
    """Embedding vectors on disk, keyed by contract fingerprint, role and text hash.

    Args:
        path: the SQLite file; ``$CTXEMB_CACHE_DIR/embeddings.sqlite3`` (by default
            ``~/.cache/ctxemb/embeddings.sqlite3``) if omitted. Created on first use.
        max_bytes: bound on the stored size; after a put that crosses it the least recently
            used entries are evicted (down to 90% of it). The file itself is somewhat larger
            (SQLite pages and indexes, and the write-ahead log between checkpoints).

    Texts are hashed (sha256), never stored. A vector comes back bit-identical to the one put,
    and only under the same fingerprint and role. Any failure of the file itself (corrupt,
    unreadable, locked too long, not a ctxemb cache) is a :class:`CacheWarning` and a miss, never
    an exception; invalid arguments raise :class:`~ctxemb_core.errors.InvalidInputError`. Texts
    follow the Embedder's rules: a list or tuple of valid Unicode strings (see
    ``ctxemb_core.validate``).

    Safe to share between threads (calls are serialised) and between processes (each opens the
    file itself; a cache passed to a worker process reopens it there).

    Example:
        >>> from ctxemb_core import Embedder, Role, contract_for
        >>> embedder = Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        >>> cache = EmbeddingCache()
        >>> vectors = cache.get_or_compute(
        ...     embedder.fingerprint, Role.DOCUMENT, ["a cat", "a dog"],
        ...     lambda missing: embedder.embed_float(missing, Role.DOCUMENT),
        ... )
        >>> vectors.shape
        (2, 384)
        >>> found, hits = cache.get_many(embedder.fingerprint, "document", ["a dog", "a cow"])
        >>> found, hits.shape
        (array([ True, False]), (1, 384))
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, max_bytes: int = _DEFAULT_MAX_BYTES
    ) -> None:
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise InvalidInputError(f"path must be a file path or None, got {path!r}")
        check_positive_int(max_bytes, "max_bytes")
        self.path = Path(path) if path is not None else cache_dir() / _FILE_NAME
        self.max_bytes = max_bytes
        self._lock = threading.RLock()
        self._handle = _Handle()
        # Set when the file is not a usable cache ("foreign", "corrupt" or "schema", and why);
        # cleared by clear(), which rebuilds a file proven ours and never touches another.
        self._broken: str | None = None
        self._broken_reason = ""
        self._warned: set[str] = set()
        self._hits = self._misses = self._evicted = 0
        self._finalizer = weakref.finalize(self, _release, self._handle)

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r}, max_bytes={self.max_bytes})"

    def __reduce__(self) -> tuple[Any, ...]:
        # A connection cannot cross a process boundary; the copy opens the file afresh.
        return (_restore, (str(self.path), self.max_bytes))

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the cache ---------------------------------------------------------------------------

    def get_many(self, fingerprint: str, role: Role | str, texts: Sequence[str]) -> CacheLookup:
        """Look up the vectors of many texts in one batch.

        Args:
            fingerprint: the contract's fingerprint (any non-empty string naming how the
                vectors were made; see :meth:`get_or_compute`).
            role: ``"query"`` or ``"document"``.
            texts: the texts, as embedded (without the role's prefix).

        Returns:
            A :class:`CacheLookup`: which texts were found, and their vectors in input order.

        Raises:
            InvalidInputError: ``texts`` is not a list of valid Unicode strings (the message
                names the index of the first bad one), an empty fingerprint or an unknown role.
        """
        fingerprint, role = _check_namespace(fingerprint, role)
        texts = check_texts(texts)
        keys = [_text_key(t) for t in texts]
        n = len(keys)
        found = np.zeros(n, dtype=bool)
        with self._lock:
            result = self._transact(
                lambda conn: _select(conn, fingerprint, role, list(dict.fromkeys(keys))),
                write=False,
                what="lookup",
            )
            if result is not None and result.dtype is None:
                self._warn(
                    "corrupt-namespace",
                    f"the record of how vectors are stored (dtype, width) for fingerprint "
                    f"{fingerprint[:12]}… role {role!r} in {self.path} failed its checksum; its "
                    "texts were treated as misses, and the next store under it rewrites it",
                )
                result = None
            if result is None:  # nothing stored under this namespace, or the file failed
                self._misses += n
                return CacheLookup(found, np.empty((0, 0), dtype=np.float32))
            dtype, dim, rows, corrupt = result
            assert dtype is not None  # for mypy: a damaged namespace was handled above
            if corrupt:
                self._warn(
                    "corrupt-rows",
                    f"{corrupt} cached vectors in {self.path} failed their checksum and were "
                    "treated as misses; they are replaced when re-embedded",
                )
            blobs = []
            hit_ids = set()
            for i, key in enumerate(keys):
                row = rows.get(key)
                if row is not None:
                    found[i] = True
                    blobs.append(row[1])
                    hit_ids.add(row[0])
            hits = len(blobs)
            self._hits += hits
            self._misses += n - hits
            if hit_ids:
                self._remember_hits(hit_ids)
        vectors = np.frombuffer(b"".join(blobs), dtype=dtype).reshape(hits, dim)
        # astype copies: the caller gets a writable, native-endian array.
        return CacheLookup(found, vectors.astype(dtype.newbyteorder("="), copy=True))

    def put_many(
        self, fingerprint: str, role: Role | str, texts: Sequence[str], vectors: Any
    ) -> None:
        """Store the vectors of many texts in one transaction, then evict if over the bound.

        Args:
            fingerprint: the contract's fingerprint.
            role: ``"query"`` or ``"document"``.
            texts: the texts, as embedded (without the role's prefix).
            vectors: ``(len(texts), dim)`` float array (float32 normally: the contract's vectors
                before the precision step). All vectors under one fingerprint and role share
                one width and dtype. A text stored before is overwritten.

        Raises:
            InvalidInputError: ``texts`` is not a list of valid Unicode strings, mismatched
                lengths, a non-float or non-2-D array, or a width or dtype other than the one
                already stored for this fingerprint and role.
        """
        fingerprint, role = _check_namespace(fingerprint, role)
        texts = check_texts(texts)
        array = _check_vectors(vectors, len(texts))
        if not texts:
            return
        # Little-endian on disk, whatever the machine, so a file can move between machines.
        stored = array.dtype.newbyteorder("<")
        array = np.ascontiguousarray(array, dtype=stored)
        dim = int(array.shape[1])
        base = _namespace_hash(fingerprint, role, stored.str, dim)
        # Keyed by text hash: a text given twice is stored once (the last vector wins).
        rows: dict[bytes, tuple[int, bytes]] = {}
        for text, row in zip(texts, array, strict=True):
            key = _text_key(text)
            blob = row.tobytes()
            rows[key] = (_row_checksum(base, key, blob), blob)
        with self._lock:
            pending = list(self._handle.pending)
            done = self._transact(
                lambda conn: self._insert(
                    conn, fingerprint, role, stored.str, dim, _digest(base), rows, pending
                ),
                write=True,
                what="store",
            )
            if done is not None:  # committed
                evicted, repaired = done
                self._handle.pending.difference_update(pending)
                self._evicted += evicted
                if repaired:
                    self._warn(
                        "corrupt-namespace",
                        f"the record of how vectors are stored (dtype, width) for fingerprint "
                        f"{fingerprint[:12]}… role {role!r} in {self.path} failed its checksum "
                        "and was rewritten; vectors stored under the damaged record are misses",
                    )

    def get_or_compute(
        self,
        fingerprint: str,
        role: Role | str,
        texts: Sequence[str],
        compute: Callable[[list[str]], Any],
    ) -> np.ndarray:
        """The vectors of ``texts``: cached ones looked up, the rest computed once and stored.

        ``compute`` receives the missing texts (each distinct text once, in first-seen order)
        and returns their ``(len(missing), dim)`` vectors; it is not called when all texts hit.

        Callers whose vectors depend on more than the contract (another backend, say) should
        fold that into ``fingerprint``, e.g. ``f"{contract.fingerprint}:onnx"``.

        Returns:
            ``(len(texts), dim)``, in input order.

        Raises:
            InvalidInputError: as :meth:`put_many`, including for what ``compute`` returned.
        """
        texts = check_texts(texts)
        lookup = self.get_many(fingerprint, role, texts)
        if lookup.found.all():  # also the empty batch: nothing to compute
            return lookup.vectors
        missing = np.flatnonzero(~lookup.found).tolist()
        todo = list(dict.fromkeys(texts[i] for i in missing))
        computed = _check_vectors(compute(todo), len(todo))
        self.put_many(fingerprint, role, todo, computed)
        out = np.empty((len(texts), computed.shape[1]), dtype=computed.dtype)
        if lookup.found.any():
            out[lookup.found] = lookup.vectors
        where = {t: j for j, t in enumerate(todo)}
        out[missing] = computed[[where[texts[i]] for i in missing]]
        return out

    def stats(self) -> CacheStats:
        """Entries and bytes of the file; hits, misses and evictions of this instance."""
        counts = self._transact(
            lambda conn: conn.execute("SELECT entries, bytes FROM state").fetchone(),
            write=False,
            what="stats",
        )
        entries, stored = counts if counts is not None else (0, 0)
        return CacheStats(entries, stored, self._hits, self._misses, self._evicted)

    def clear(self) -> None:
        """Remove every entry (all fingerprints and roles).

        A ctxemb cache file that cannot be used (corrupt, or of another cache schema) is deleted
        with its journal files and created anew, once its header proves again, just before,
        that it is ours; other processes with it open keep their copy until they reopen it.
        Anything that is not provably a ctxemb cache (another program's database, a file that
        is not SQLite, a damaged header, a directory) is left exactly as it is, with a
        :class:`CacheWarning` on every call.
        """
        with self._lock:
            self._handle.pending.clear()
            if self._broken is None and self._transact(
                _drop_all, write=True, what="clear", quiet=True
            ):
                self._vacuum()
                return
            if self._broken is None:
                return  # busy or unavailable: warned, and nothing was changed
            state = "foreign"
            if self._broken != "foreign":
                # Proven ours when it was opened; proven again now, as it may have been replaced.
                self._close()
                state, reason = _inspect(self.path)
                if state == "foreign":
                    self._broken, self._broken_reason = "foreign", reason
            if self._broken == "foreign":
                warnings.warn(
                    CacheWarning(
                        f"clear() left {self.path} as it is: {self._broken_reason}, so nothing "
                        "proves it is a ctxemb cache and ctxemb never modifies or deletes it. "
                        "Move or delete it yourself if it is yours, or give EmbeddingCache a "
                        "path of its own"
                    ),
                    stacklevel=2,
                )
                return
            if state == "ours":
                # The journals go too: replayed into a new file, they would resurrect old pages.
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(f"{self.path}{suffix}")
            self._broken, self._broken_reason = None, ""
            self._warned.clear()
            if self._transact(_drop_all, write=True, what="clear"):
                self._vacuum()

    def close(self) -> None:
        """Write pending access times and close the file; later calls reopen it."""
        with self._lock:
            self._close()

    # -- internals ---------------------------------------------------------------------------

    def _close(self) -> None:
        _release(self._handle)

    def _vacuum(self) -> None:
        # Return the freed pages to the file system (the file was made with
        # auto_vacuum=incremental); a failure only costs disk space.
        conn = self._handle.conn
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                # Stepped to the end: each step of this pragma frees one page.
                conn.execute("PRAGMA incremental_vacuum").fetchall()

    def _remember_hits(self, ids: Iterable[int]) -> None:
        handle = self._handle
        if not handle.pending:
            handle.since = time.monotonic()
        handle.pending.update(ids)
        if len(handle.pending) >= _TOUCH_ROWS or time.monotonic() - handle.since >= _TOUCH_SECONDS:
            pending = list(handle.pending)
            if self._transact(lambda conn: _touch(conn, pending), write=True, what="access times"):
                handle.pending.difference_update(pending)

    def _insert(
        self,
        conn: sqlite3.Connection,
        fingerprint: str,
        role: str,
        dtype: str,
        dim: int,
        checksum: int,
        rows: dict[bytes, tuple[int, bytes]],
        touched: list[int],
    ) -> tuple[int, bool]:
        """Store ``rows``; returns how many entries were evicted and whether the namespace row
        was damaged and rewritten."""
        ns = conn.execute(
            "SELECT id, dtype, dim, checksum FROM namespaces WHERE fingerprint = ? AND role = ?",
            (fingerprint, role),
        ).fetchone()
        repaired = False
        if ns is None:
            ns_id = conn.execute(
                "INSERT INTO namespaces (fingerprint, role, dtype, dim, checksum) "
                "VALUES (?, ?, ?, ?, ?)",
                (fingerprint, role, dtype, dim, checksum),
            ).lastrowid
        elif _namespace_layout(fingerprint, role, *ns[1:]) is None:
            # A damaged record cannot say what was stored: it is rewritten as this put says.
            # Rows stored under another layout then fail their own checksums (misses).
            ns_id, repaired = ns[0], True
            conn.execute(
                "UPDATE namespaces SET dtype = ?, dim = ?, checksum = ? WHERE id = ?",
                (dtype, dim, checksum, ns_id),
            )
        elif (ns[1], ns[2]) != (dtype, dim):
            raise InvalidInputError(
                f"vectors of width {dim} ({np.dtype(dtype).name}) do not match the "
                f"{ns[2]}-wide {np.dtype(ns[1]).name} vectors already cached for fingerprint "
                f"{fingerprint[:12]}… role {role!r}; one contract has one output width"
            )
        else:
            ns_id = ns[0]
        clock = _tick(conn)
        # Hits since the last write become as recent as this write, before eviction runs.
        _touch_ids(conn, touched, clock)
        # What is replaced rather than added, for the byte and entry counts.
        old: dict[bytes, int] = {}
        keys = list(rows)
        for chunk in _chunks(keys, _CHUNK - 1):
            marks = ",".join("?" * len(chunk))
            old.update(
                conn.execute(
                    f"SELECT key, length(vector) FROM vectors WHERE ns = ? AND key IN ({marks})",
                    (ns_id, *chunk),
                )
            )
        conn.executemany(
            "INSERT INTO vectors (ns, key, last_access, checksum, vector) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (ns, key) DO UPDATE SET last_access = excluded.last_access, "
            "checksum = excluded.checksum, vector = excluded.vector",
            [(ns_id, key, clock, crc, blob) for key, (crc, blob) in rows.items()],
        )
        added = sum(
            len(blob) - old[key] if key in old else len(key) + len(blob)
            for key, (_, blob) in rows.items()
        )
        conn.execute(
            "UPDATE state SET bytes = bytes + ?, entries = entries + ?",
            (added, len(rows) - len(old)),
        )
        return _evict(conn, self.max_bytes), repaired

    def _transact(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        write: bool,
        what: str,
        quiet: bool = False,
    ) -> T | None:
        """Run ``fn`` in one transaction, retrying while the file is locked.

        Returns ``None`` (after a warning) when the file fails; invalid arguments raised by
        ``fn`` roll the transaction back and propagate. ``quiet`` leaves the warning about a
        file that is not a usable cache to the caller (clear() says what it did about it).
        """
        with self._lock:
            for attempt in range(_ATTEMPTS):
                try:
                    conn = self._connect()
                    if conn is None:
                        return None
                    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    try:
                        result = fn(conn)
                        conn.execute("COMMIT")
                    finally:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                    return result
                except sqlite3.Error as exc:
                    kind = _classify(exc)
                    if kind == "busy" and attempt + 1 < _ATTEMPTS:
                        # Jitter, so that two processes that collided do not collide again.
                        time.sleep(0.05 * 2**attempt * (0.5 + random.random()))
                        continue
                    self._fail(kind, exc, what, quiet=quiet)
                    return None
            return None  # pragma: no cover - the loop always returns

    def _connect(self) -> sqlite3.Connection | None:
        if self._broken is not None:
            return None
        handle = self._handle
        if handle.conn is not None and handle.pid != os.getpid():
            # Inherited through fork: SQLite connections must not cross processes, and closing
            # the parent's would release its locks, so the copy is dropped, not closed.
            handle.conn, handle.pending = None, set()
        if handle.conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise sqlite3.OperationalError(f"cannot create {self.path.parent}: {exc}") from exc
            # Decided from the raw bytes before SQLite opens the file: opening alone may roll
            # back a journal or create WAL sidecars, which must never happen to another file.
            state, reason = _inspect(self.path)
            if state == "foreign":
                raise _ForeignFile(reason, ours=False)
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            # A damaged row may hold text that is not UTF-8 where a blob belongs: decoded
            # leniently, it fails its own checks (one miss) instead of failing the whole read.
            conn.text_factory = _lenient_text
            try:
                _prepare(conn)
            except BaseException:
                conn.close()
                raise
            handle.conn, handle.pid = conn, os.getpid()
        return handle.conn

    def _fail(self, kind: str, exc: sqlite3.Error, what: str, *, quiet: bool = False) -> None:
        if kind in ("foreign", "corrupt", "schema"):
            self._broken, self._broken_reason = kind, str(exc)
            self._close()
            if quiet:
                return
        if kind == "foreign":
            advice = (
                "nothing proves it is a ctxemb cache, so it is never modified or deleted; the "
                "cache is off: give EmbeddingCache a path of its own"
            )
        elif kind in ("corrupt", "schema"):
            advice = "the cache is off; clear() starts a new one in its place"
        elif kind == "busy":
            advice = "another process held the file too long; this call skipped the cache"
        else:
            advice = "this call skipped the cache"
        self._warn(kind, f"embedding cache {self.path}: {what} failed ({exc}); {advice}")

    def _warn(self, kind: str, message: str) -> None:
        # Once per kind and instance: an indexing loop over a broken cache must not flood logs.
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(CacheWarning(message), stacklevel=_caller_level())


# -- SQL steps (all but _prepare run inside a transaction opened by _transact) ----------------


def _prepare(conn: sqlite3.Connection) -> None:
    # _inspect found the file absent, empty or carrying our application_id; nothing below
    # writes to it before the same is proven again through SQLite, in a write transaction.
    if conn.execute("PRAGMA application_id").fetchone()[0] != _APPLICATION_ID:
        # Only possible before the first table exists: larger pages waste less around
        # ~1.5 kB vectors; incremental vacuum lets clear() return space.
        conn.execute("PRAGMA page_size = 8192")
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Under the write lock: two processes may race to create the file (the second
            # finds the work done), and another program may have filled it since _inspect.
            if conn.execute("PRAGMA application_id").fetchone()[0] != _APPLICATION_ID:
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if tables or version:
                    raise _ForeignFile(_FOREIGN_DATABASE, ours=False)
                # Tables, application_id and version in one transaction, in rollback-journal
                # mode: a file is either empty or carries our mark, never half of it.
                for statement in _statements(_SCHEMA_SQL):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {CACHE_SCHEMA}")
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != CACHE_SCHEMA:
        raise _ForeignFile(
            f"the file is a ctxemb cache of schema {version}; this ctxemb reads schema "
            f"{CACHE_SCHEMA}",
            ours=True,
        )
    # WAL: readers never block the writer nor each other; NORMAL sync is crash-safe in WAL
    # (a power cut may lose the last transactions, never consistency), and this is a cache.
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")


class _Rows(NamedTuple):
    # What one lookup read; dtype is None when the namespace row failed its own checksum.
    dtype: np.dtype[Any] | None
    dim: int
    rows: dict[bytes, tuple[int, bytes]]
    corrupt: int


def _select(
    conn: sqlite3.Connection, fingerprint: str, role: str, keys: list[bytes]
) -> _Rows | None:
    ns = conn.execute(
        "SELECT id, dtype, dim, checksum FROM namespaces WHERE fingerprint = ? AND role = ?",
        (fingerprint, role),
    ).fetchone()
    if ns is None:
        return None
    ns_id, dtype_str, dim, checksum = ns
    layout = _namespace_layout(fingerprint, role, dtype_str, dim, checksum)
    if layout is None:
        return _Rows(None, 0, {}, 0)
    dtype, base = layout
    size = dim * dtype.itemsize
    rows: dict[bytes, tuple[int, bytes]] = {}
    corrupt = 0
    for chunk in _chunks(keys, _CHUNK - 1):
        marks = ",".join("?" * len(chunk))
        for row_id, key, stored, blob in conn.execute(
            f"SELECT id, key, checksum, vector FROM vectors WHERE ns = ? AND key IN ({marks})",
            (ns_id, *chunk),
        ):
            # The checksum covers fingerprint, role, dtype, width, key and vector: a flipped
            # bit anywhere, even one that moved a row into another namespace, is a miss.
            if (
                isinstance(blob, bytes)
                and len(blob) == size
                and _row_checksum(base, key, blob) == stored
            ):
                rows[key] = (row_id, blob)
            else:
                corrupt += 1
    return _Rows(dtype, dim, rows, corrupt)


def _tick(conn: sqlite3.Connection) -> int:
    # A logical clock shared by all processes: recency is the order of writes, which is all
    # LRU needs, and it is immune to wall-clock jumps.
    conn.execute("UPDATE state SET clock = clock + 1")
    return int(conn.execute("SELECT clock FROM state").fetchone()[0])


def _touch_ids(conn: sqlite3.Connection, ids: Iterable[int], clock: int) -> None:
    # Row ids may have been evicted (and reused) by another process meanwhile; refreshing the
    # wrong row only keeps one extra entry a little longer.
    for chunk in _chunks(list(ids), _CHUNK - 1):
        marks = ",".join("?" * len(chunk))
        conn.execute(
            f"UPDATE vectors SET last_access = ? WHERE id IN ({marks}) AND last_access < ?",
            (clock, *chunk, clock),
        )


def _touch(conn: sqlite3.Connection, ids: list[int]) -> bool:
    if ids:
        _touch_ids(conn, ids, _tick(conn))
    return True


def _evict(conn: sqlite3.Connection, max_bytes: int) -> int:
    total = conn.execute("SELECT bytes FROM state").fetchone()[0]
    if total <= max_bytes:
        return 0
    excess = total - int(max_bytes * _LOW_WATER)
    evicted = freed = 0
    while excess > 0:
        victims = []
        for row_id, size in conn.execute(
            "SELECT id, length(key) + length(vector) FROM vectors ORDER BY last_access, id LIMIT ?",
            (_CHUNK - 1,),
        ):
            victims.append(row_id)
            excess -= size
            freed += size
            if excess <= 0:
                break
        if not victims:
            break
        marks = ",".join("?" * len(victims))
        conn.execute(f"DELETE FROM vectors WHERE id IN ({marks})", victims)
        evicted += len(victims)
    conn.execute("UPDATE state SET bytes = bytes - ?, entries = entries - ?", (freed, evicted))
    if evicted:  # namespaces left empty go too (one index probe each)
        conn.execute(
            "DELETE FROM namespaces WHERE NOT EXISTS "
            "(SELECT 1 FROM vectors WHERE vectors.ns = namespaces.id)"
        )
    return evicted


def _drop_all(conn: sqlite3.Connection) -> bool:
    conn.execute("DELETE FROM vectors")  # no WHERE, no trigger: SQLite truncates in one step
    conn.execute("DELETE FROM namespaces")
    conn.execute("UPDATE state SET bytes = 0, entries = 0")
    return True


# -- helpers ---------------------------------------------------------------------------------


class _ForeignFile(sqlite3.DatabaseError):
    """The file is a database, but not a cache this version can use.

    ``ours`` tells a ctxemb cache of another schema (safe to rebuild) from another
    application's database (never touched).
    """

    def __init__(self, message: str, *, ours: bool) -> None:
        super().__init__(message)
        self.ours = ours


def _classify(exc: sqlite3.Error) -> str:
    if isinstance(exc, _ForeignFile):
        return "schema" if exc.ours else "foreign"
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    message = str(exc).lower()
    if code is not None:
        code &= 0xFF
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return "busy"
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return "corrupt"
    if "locked" in message or "busy" in message:
        return "busy"
    if "not a database" in message or "malformed" in message or "corrupt" in message:
        return "corrupt"
    return "unavailable"


def _release(handle: _Handle) -> None:
    conn = handle.conn
    if conn is None or handle.pid != os.getpid():
        return
    handle.conn = None
    try:
        if handle.pending:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _touch(conn, list(handle.pending))
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # access times are a hint; losing them only makes eviction less exact
    finally:
        handle.pending.clear()
        conn.close()


def _caller_level() -> int:
    # The stack level of the first frame outside this module, so that a warning points at the
    # caller's line whichever public method it came through.
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _restore(path: str, max_bytes: int) -> EmbeddingCache:
    return EmbeddingCache(path, max_bytes=max_bytes)


def _statements(script: str) -> list[str]:
    # executescript() would commit the open transaction first; one statement at a time keeps
    # the schema's creation in one transaction.
    return [part.strip() for part in script.split(";") if part.strip()]


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _text_key(text: str) -> bytes:
    # Texts were checked to be valid Unicode, so each has exactly one UTF-8 form.
    return hashlib.sha256(text.encode("utf-8")).digest()


def _namespace_hash(fingerprint: str, role: str, dtype: str, dim: int) -> hashlib.blake2b:
    # NUL-separated: no two (fingerprint, role, dtype, dim) give the same bytes. A damaged
    # dtype read back leniently carries surrogates; they hash as the bytes they came from.
    h = hashlib.blake2b(digest_size=8, person=_PERSON)
    h.update(f"{fingerprint}\0{role}\0{dtype}\0{dim}\0".encode("utf-8", "surrogateescape"))
    return h


def _digest(h: hashlib.blake2b) -> int:
    # Signed: SQLite integers are signed 64-bit.
    return int.from_bytes(h.digest(), "little", signed=True)


def _row_checksum(base: hashlib.blake2b, key: bytes, blob: bytes) -> int:
    h = base.copy()
    h.update(key)  # always 32 bytes: key and vector cannot trade bytes
    h.update(blob)
    return _digest(h)


def _namespace_layout(
    fingerprint: str, role: str, dtype: Any, dim: Any, checksum: Any
) -> tuple[np.dtype[Any], hashlib.blake2b] | None:
    """The dtype and the rows' checksum seed of a namespace row, or None if it is damaged.

    SQLite's typing is dynamic: a flipped bit in a record header can turn a column into
    another type, so types are checked before the checksum, and the dtype is parsed after it.
    """
    if (
        not isinstance(dtype, str)
        or isinstance(dim, bool)
        or not isinstance(dim, int)
        or not isinstance(checksum, int)
        or dim <= 0
    ):
        return None
    base = _namespace_hash(fingerprint, role, dtype, dim)
    if _digest(base) != checksum:
        return None
    try:
        parsed = np.dtype(dtype)
    except (TypeError, ValueError):
        return None
    # Only little-endian floats are ever written.
    if parsed.kind != "f" or parsed.byteorder == ">":
        return None
    return parsed, base


def _inspect(path: Path) -> tuple[str, str]:
    """Whether the file at ``path`` is ``"absent"``, ``"empty"``, ``"ours"`` or ``"foreign"``.

    Read from the raw bytes of its SQLite header, without opening it in SQLite. "empty" is a
    zero-byte file or an SQLite file in which no schema, version or application id was ever
    set (what sqlite3.connect leaves). The second item says why a foreign file is foreign.
    """
    try:
        if os.path.islink(path):
            # Through a link, "absent" or "empty" would be another's file (or name) to create
            # or fill: only a link to a file already proven ours is followed.
            target = Path(os.path.realpath(path))
            state, reason = ("foreign", "a link loop") if target.is_symlink() else _inspect(target)
            if state == "ours":
                return state, reason
            return "foreign", (
                f"it is a symbolic link to {target}, which is not a ctxemb cache "
                f"({reason or state})"
            )
        info = os.stat(path)
    except FileNotFoundError:
        return "absent", ""
    except OSError as exc:
        raise sqlite3.OperationalError(f"cannot inspect {path}: {exc}") from exc
    if stat.S_ISDIR(info.st_mode):
        return "foreign", "it is a directory"
    if not stat.S_ISREG(info.st_mode):
        return "foreign", "it is not a regular file"
    if info.st_size == 0:
        return "empty", ""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise sqlite3.OperationalError(f"cannot read {path}: {exc}") from exc
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        return "foreign", "it is not an SQLite database, or its header is damaged"
    app = int.from_bytes(header[68:72], "big")
    if app == _APPLICATION_ID:
        return "ours", ""
    # Schema cookie (40), user_version (60), WAL read/write versions (18, 19): all unset in a
    # database nobody has used yet; ours are made in rollback mode, so WAL means another's.
    untouched = header[40:44] == header[60:64] == bytes(4) and header[18:20] == b"\x01\x01"
    if app == 0 and untouched:
        return "empty", ""
    if app == 0:
        return "foreign", _FOREIGN_DATABASE
    return "foreign", f"{_FOREIGN_DATABASE} (application_id {app:#010x})"


def _check_namespace(fingerprint: Any, role: Any) -> tuple[str, str]:
    if not isinstance(fingerprint, str) or not fingerprint.strip():
        raise InvalidInputError(
            f"fingerprint must be a non-empty string (contract.fingerprint), got {fingerprint!r}"
        )
    fingerprint = check_text(fingerprint, "fingerprint")
    value = role.value if isinstance(role, Role) else role
    if value not in _VALID_ROLES:
        raise InvalidInputError(
            f"role={role!r} is not valid; valid values are {', '.join(map(repr, _VALID_ROLES))}"
        )
    return fingerprint, value


def _check_vectors(vectors: Any, n: int) -> np.ndarray:
    try:
        array = np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"vectors must be a 2-D float array: {exc}") from None
    if array.dtype.kind != "f":
        raise InvalidInputError(
            f"vectors must be floats (the contract's vectors before the precision step), got "
            f"{array.dtype}"
        )
    if array.ndim != 2 or array.shape[1] == 0:
        raise InvalidInputError(
            f"vectors must be a (texts, dim) array with dim >= 1, got shape {array.shape}"
        )
    if array.shape[0] != n:
        raise InvalidInputError(f"{n} texts but {array.shape[0]} vectors; they pair one to one")
    return array
