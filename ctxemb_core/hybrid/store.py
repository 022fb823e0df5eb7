"""The lexical side in a transactional store: SQLite beside an embedded store, PostgreSQL tables
beside a pgvector table, one engine over both.

Four tables hold every lexical side of a database (SQLite: one side per file)::

    ctxemb_lexical_sides     one row per side: the dense index it belongs to (its name and its
                             identity: a collection's id, a table's oid), the hybrid contract
                             (recipe, fitted vocabulary digest, fusion), the analyzer canary,
                             the fitted statistics (documents, total length, terms sum) and a
                             version that every write moves
    ctxemb_lexical_docs      (side, num) -> id, text digest, length in terms
    ctxemb_lexical_postings  (side, term, num) -> term frequency
    ctxemb_lexical_terms     (side, term) -> document frequency, total frequency

A write changes the rows of the documents it writes or deletes and the terms they hold, and the
statistics by as much (:meth:`LexicalStore.apply`): no rebuild. It is one transaction that holds
the side's row (PostgreSQL: ``FOR UPDATE``; SQLite: ``BEGIN IMMEDIATE``), so writers take turns
and every write sees the one before. In PostgreSQL the transaction is the dense rows' own
(``ctxemb_pgvector``'s write path calls it), so the two sides cannot get out of step there.

The fitted vocabulary digest is a sum of per-term hashes (:func:`~ctxemb_core.hybrid.index.
terms_sum`), so a write keeps it current from the terms it touches. Opening a side recomputes
it, and the document count and total length, from the postings and documents themselves
(:meth:`LexicalStore.check`): an edited posting, a dropped document or a statistic rewritten to
match something else is a :class:`~ctxemb_core.errors.DamagedStampError`, never a pass.

A side records the dense index it belongs to; :meth:`LexicalStore.check_owner` refuses any other
(:class:`ForeignLexicalError`). Scores are BM25 computed exactly as
:class:`~ctxemb_core.hybrid.LexicalIndex` computes them (bm25s' Lucene variant), from the same
postings, bit for bit.

Old file-set sides (a ``current`` pointer and ``v-*`` version folders, ctxemb 0.1) are read once
by :func:`read_file_set`, every file's digest checked, and converted by the hybrid index's open.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ctxemb_core._files import sha256_file
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import (
    CtxembError,
    DamagedStampError,
    DataFormatError,
    InvalidInputError,
    MissingStampError,
    StampError,
    StoreUnavailableError,
)
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.index import (
    HASH_MODULUS,
    LexicalIndex,
    term_hash,
    terms_sum,
    vocabulary_digest,
)
from ctxemb_core.hybrid.lexical import Analyzer
from ctxemb_core.remedy import BUILD_LEXICAL_SIDE, REBUILD_LEXICAL_SIDE

__all__ = [
    "MARKS",
    "SQL_TABLES",
    "ForeignLexicalError",
    "HybridStamp",
    "LexicalStore",
    "NoLexicalSideError",
    "SQLiteLexical",
    "ServerLexical",
    "read_file_set",
]

#: The form of a side's rows. 3: a document's digest is of the text the side analysed (the text
#: the dense side stores). 2 (an earlier ctxemb): the digest a dense record's metadata carried,
#: which names the text its vector was made from and stays when a raw client rewrites only the
#: stored text; a side of schema 2 is read, and brought to 3 by the hybrid index's next open
#: (:func:`~ctxemb_core.hybrid.pair.open_hybrid`).
STORE_SCHEMA = 3
#: Schemas read (the older brought to :data:`STORE_SCHEMA` on open).
_READ_SCHEMAS = (2, STORE_SCHEMA)
#: The SQLite file of a lexical side, inside its folder.
SQLITE_FILE = "lexical.sqlite3"
#: Ids or terms per ``IN (...)`` list (SQLite's limit on parameters is far above it).
CHUNK = 500
_BUSY_TIMEOUT = 60.0

SIDES = "ctxemb_lexical_sides"
DOCS = "ctxemb_lexical_docs"
POSTINGS = "ctxemb_lexical_postings"
TERMS = "ctxemb_lexical_terms"
#: Ids a writer is about to write to a dense store that shares no transaction with the lexical
#: side: taken from the dense side by the next writer if the one that wrote them stopped first.
PENDING = "ctxemb_lexical_pending"
#: In a database server's tables (:class:`ServerLexical`): which dense indexes were given a side.
MARKS = "ctxemb_hybrid_marks"
#: The tables as queries name them (``{sides}``...): a dialect's :meth:`Dialect.sql` gives
#: each key its table's name in its database (quoted, in a schema).
TABLES = {"sides": SIDES, "docs": DOCS, "postings": POSTINGS, "terms": TERMS, "pending": PENDING}
#: The tables in standard SQL, named as queries name them (:meth:`Dialect.sql`), for a database
#: server's dialect (PostgreSQL's); SQLite keeps its own form (:class:`SQLiteLexical`).
SQL_TABLES = """
CREATE TABLE IF NOT EXISTS {sides} (
  side integer PRIMARY KEY, name text NOT NULL UNIQUE, schema integer NOT NULL,
  owner text NOT NULL, token text NOT NULL, contract text NOT NULL, canary text NOT NULL,
  documents bigint NOT NULL, length bigint NOT NULL, total text NOT NULL,
  version bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {docs} (
  side integer NOT NULL, num bigint NOT NULL, id text NOT NULL, digest text NOT NULL,
  length integer NOT NULL, PRIMARY KEY (side, num), UNIQUE (side, id));
CREATE TABLE IF NOT EXISTS {postings} (
  side integer NOT NULL, term text NOT NULL, num bigint NOT NULL, tf integer NOT NULL,
  PRIMARY KEY (side, term, num));
CREATE INDEX IF NOT EXISTS ctxemb_lexical_postings_num ON {postings} (side, num);
CREATE TABLE IF NOT EXISTS {terms} (
  side integer NOT NULL, term text NOT NULL, df integer NOT NULL, cf bigint NOT NULL,
  PRIMARY KEY (side, term));
CREATE TABLE IF NOT EXISTS {pending} (
  side integer NOT NULL, id text NOT NULL, PRIMARY KEY (side, id));
"""


class NoLexicalSideError(MissingStampError):
    """The store holds no lexical side for this dense index (none was ever built here)."""


class ForeignLexicalError(StampError):
    """A lexical side belongs to another dense index than the one it is opened with.

    Attributes:
        where: where the lexical side is (a folder, a database's tables).
        owner: the dense index it records (name and identity).
        caller: the dense index it was opened with.
    """

    def __init__(
        self, where: str, owner: str, caller: str, remedy: str, remedy_cli: str | None = None
    ) -> None:
        self.where, self.owner, self.caller, self.remedy = where, owner, caller, remedy
        self.remedy_cli = remedy_cli
        problem = (
            f"the lexical side in {where} belongs to the dense index {owner}, not to {caller}; "
            "a lexical side belongs to exactly one dense index, and nothing of it was read or "
            "written."
        )
        cli = None if remedy_cli is None else f"{problem} {remedy_cli}"
        super().__init__(f"{problem} {remedy}", cli=cli)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.where, self.owner, self.caller, self.remedy, self.remedy_cli))


@dataclass(frozen=True)
class HybridStamp:
    """What a lexical side records about itself (see the module docstring).

    ``contract.lexical`` is fitted: its ``vocabulary`` is :func:`vocabulary_digest` of
    ``documents``, ``length`` and ``total``, its ``documents`` is ``documents``.
    """

    contract: HybridContract
    analyzer_canary: str
    owner: str
    token: str
    documents: int
    length: int
    total: int
    version: int
    #: The form of the side's rows (:data:`STORE_SCHEMA`; an older one is brought to it).
    schema: int = STORE_SCHEMA

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint


class Dialect(Protocol):
    """What one database engine gives the engine: its words and its transactions.

    Queries use ``?`` markers and the keys of :data:`TABLES` (``{sides}``, ``{docs}``...) for
    the tables, and ``{docs_by_id}`` / ``{postings_by_num}`` where a lookup by id or number
    wants its index named; :meth:`sql` turns them into the engine's text.
    """

    #: Where the side is, in words (a folder, ``PostgreSQL "public".ctxemb_lexical_*``).
    where: str
    #: The owner's name: the dense index's name (its key among the sides of one database).
    name: str
    #: Added to the read of the side's row in a write transaction (``" FOR UPDATE"``).
    lock: str
    #: The database holds one side only (a SQLite file).
    single: bool

    def sql(self, query: str) -> str: ...

    def present(self) -> bool: ...

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]: ...

    def create_tables(self) -> None: ...

    def writing(self) -> contextlib.AbstractContextManager[None]: ...

    def creating(self) -> contextlib.AbstractContextManager[None]: ...

    def reading(self) -> contextlib.AbstractContextManager[None]: ...


class LexicalStore:
    """One lexical side in a database (see the module docstring).

    Build one over a dialect (:class:`SQLiteLexical`, ``ctxemb_pgvector``'s); the hybrid index
    (:mod:`~ctxemb_core.hybrid.pair`) drives it.
    """

    def __init__(self, db: Dialect) -> None:
        self.db = db
        self._side: int | None = None
        self._analyzer: tuple[str, Analyzer] | None = None

    @property
    def where(self) -> str:
        return self.db.where

    # -- the side's row --------------------------------------------------------------------

    def side(self) -> int | None:
        """The side's key, or ``None`` when the database holds no side for this name."""
        if self._side is None:
            if not self.db.present():
                return None
            rows = self._named()
            self._side = int(rows[0][0]) if rows else None
        return self._side

    def _named(self) -> list[tuple[Any, ...]]:
        # A database of one side (a SQLite file) has whichever side it holds: it is then
        # checked to be this dense index's, never passed over as "none here".
        if self.db.single:
            return self.db.execute("SELECT side FROM {sides}")
        return self.db.execute("SELECT side FROM {sides} WHERE name = ?", (self.db.name,))

    def exists(self) -> bool:
        return self.side() is not None

    def stamp(self, *, lock: bool = False) -> HybridStamp:
        """The side's stamp, checked against itself (not yet against its rows: :meth:`check`).

        Raises:
            MissingStampError: no side.
            DamagedStampError: a row that cannot be read, or a fitted contract that is not its
                statistics' digest.
        """
        side = self.side()
        if side is None:
            raise BUILD_LEXICAL_SIDE.into(
                NoLexicalSideError, f"{self.where} holds no lexical side; build it: {{do}}"
            )
        rows = self.db.execute(
            "SELECT schema, owner, token, contract, canary, documents, length, total, version FROM "
            "{sides} WHERE side = ?" + (self.db.lock if lock else ""),
            (side,),
        )
        if len(rows) != 1:
            raise DamagedStampError(f"the lexical side in {self.where} has no stamp row")
        schema, owner, token, text, canary, documents, length, total, version = rows[0]
        try:
            if schema not in _READ_SCHEMAS:
                raise ValueError(f"schema {schema!r} is not {STORE_SCHEMA}")
            contract = HybridContract.from_json(text)
            stamp = HybridStamp(
                contract, str(canary), str(owner), str(token), int(documents), int(length),
                int(total, 16), int(version), int(schema),
            )  # fmt: skip
        except (ValueError, TypeError, DataFormatError) as exc:
            raise DamagedStampError(
                f"the lexical stamp in {self.where} cannot be read: {exc}"
            ) from None
        fitted = contract.lexical
        if fitted.documents != stamp.documents or fitted.vocabulary != vocabulary_digest(
            stamp.documents, stamp.length, stamp.total
        ):
            raise REBUILD_LEXICAL_SIDE.into(
                DamagedStampError,
                f"the lexical stamp in {self.where} contradicts itself: its fitted contract is "
                "not the digest of its statistics (edited around ctxemb); rebuild the lexical "
                "side ({do})",
            )
        return stamp

    def check_owner(
        self, stamp: HybridStamp, owner: str, remedy: str, remedy_cli: str | None = None
    ) -> None:
        """The side belongs to ``owner`` (the dense index's name and identity), or
        :class:`ForeignLexicalError` (``remedy_cli``: its advice on the command line)."""
        if stamp.owner != owner:
            raise ForeignLexicalError(self.where, stamp.owner, owner, remedy, remedy_cli)

    def check(self, *, full: bool = False) -> HybridStamp:
        """The stamp, once the side's rows are found to be what it records: the documents'
        count and total length, and each term's document and total frequency recounted from
        the postings and found in the terms table, in the database (an edited, added or
        dropped posting does not pass). ``full`` (verify) also sums the terms table as the
        stamp's vocabulary digest does (a terms table edited to match edited postings).

        Raises:
            DamagedStampError: any disagreement (rows edited around ctxemb).
        """
        with self.db.reading():
            stamp = self.stamp()
            side = self.side()
            found = self.db.execute(
                "SELECT count(*), coalesce(sum(length), 0) FROM {docs} WHERE side = ?", (side,)
            )[0]
            # Each term's document and total frequency recounted from the postings (one ordered
            # scan) and looked up in the terms table, inside the database.
            groups, differ = self.db.execute(
                "SELECT count(*), coalesce(sum(CASE WHEN t.df IS NULL OR t.df <> p.df OR "
                "t.cf <> p.cf THEN 1 ELSE 0 END), 0) FROM (SELECT term, count(*) AS df, "
                "sum(tf) AS cf FROM {postings} WHERE side = ? GROUP BY term) p LEFT JOIN "
                "{terms} t ON t.side = ? AND t.term = p.term",
                (side, side),
            )[0]
            terms, cf = self.db.execute(
                "SELECT count(*), coalesce(sum(cf), 0) FROM {terms} WHERE side = ?", (side,)
            )[0]
            entries = None
            if full:
                rows = self.db.execute("SELECT term, df, cf FROM {terms} WHERE side = ?", (side,))
                entries = [(str(t), int(df), int(n)) for t, df, n in rows]
        wrong = []
        if (int(found[0]), int(found[1])) != (stamp.documents, stamp.length):
            wrong.append(
                f"{found[0]} documents of {found[1]} terms, the stamp says {stamp.documents} of "
                f"{stamp.length}"
            )
        if int(differ) or int(groups) != int(terms) or int(cf) != stamp.length:
            wrong.append("the postings are not the vocabulary the terms table and stamp count")
        if entries is not None and terms_sum(entries) != stamp.total:
            wrong.append("the vocabulary is not the one the stamp's digest was fitted on")
        if wrong:
            raise REBUILD_LEXICAL_SIDE.into(
                DamagedStampError,
                f"the lexical side in {self.where} is not what its stamp records: "
                + "; ".join(wrong)
                + ". It was edited around ctxemb; rebuild it from the dense side ({do})",
            )
        return stamp

    def analyzer(self, stamp: HybridStamp) -> Analyzer:
        recipe = stamp.contract.lexical.recipe()
        if self._analyzer is None or not same_contract(recipe, self._analyzer[0], exact=True):
            self._analyzer = (recipe.fingerprint, Analyzer(recipe))
        return self._analyzer[1]

    # -- creating and dropping ----------------------------------------------------------------

    def create(
        self,
        contract: HybridContract,
        owner: str,
        canary: str,
        index: LexicalIndex | None = None,
        *,
        schema: int = STORE_SCHEMA,
    ) -> HybridStamp:
        """A new side under ``contract`` (its lexical recipe), empty or holding ``index`` (an
        old file set converted: its digests are of ``schema`` 2's form).

        Raises:
            StampError: another process created one first (open it instead).
        """
        empty = LexicalIndex.fit([], [], contract.lexical).contract
        stamped = contract.with_(lexical=empty)
        self.db.create_tables()
        with self.db.creating():
            if self._named():
                raise StampError(f"{self.where} already holds a lexical side (another process)")
            rows = self.db.execute("SELECT coalesce(max(side), 0) + 1 FROM {sides}")
            for table in ("{postings}", "{docs}", "{terms}", "{pending}"):
                # Rows a side's stamp row was deleted from (by hand) must not become this one's.
                self.db.execute(f"DELETE FROM {table} WHERE side = ?", (rows[0][0],))
            self.db.execute(
                "INSERT INTO {sides} (side, name, schema, owner, token, contract, canary, "
                "documents, length, total, version) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?, 1)",
                (
                    rows[0][0], self.db.name, schema, owner, uuid.uuid4().hex,
                    stamped.to_json(), canary, f"{0:064x}",
                ),
            )  # fmt: skip
            self._side = None
            stamp = self.stamp(lock=True)
            if index is not None and len(index):
                self._load(stamp, index)
        return self.stamp()

    def _load(self, stamp: HybridStamp, index: LexicalIndex) -> None:
        """Write a whole fitted index into the empty side (its postings as they are)."""
        side = self.side()
        self.db.executemany(
            "INSERT INTO {docs} (side, num, id, digest, length) VALUES (?, ?, ?, ?, ?)",
            [
                (side, n + 1, i, d, int(length))
                for n, (i, d, length) in enumerate(
                    zip(index.ids, index.digests, index.lengths.tolist(), strict=True)
                )
            ],
        )
        rows, terms = [], []
        for t, term in enumerate(index.vocabulary):
            lo, hi = int(index.indptr[t]), int(index.indptr[t + 1])
            docs, tfs = index.postings[lo:hi].tolist(), index.frequencies[lo:hi].tolist()
            rows += [(side, term, d + 1, f) for d, f in zip(docs, tfs, strict=True)]
            terms.append((side, term, hi - lo, sum(tfs)))
        self.db.executemany(
            "INSERT INTO {postings} (side, term, num, tf) VALUES (?, ?, ?, ?)", rows
        )
        self.db.executemany("INSERT INTO {terms} (side, term, df, cf) VALUES (?, ?, ?, ?)", terms)
        total = terms_sum((t, df, cf) for _, t, df, cf in terms)
        length = int(index.lengths.sum())
        contract = stamp.contract.with_(lexical=index.contract)
        if index.contract.vocabulary != vocabulary_digest(len(index), length, total):
            raise DamagedStampError(f"the lexical index written to {self.where} contradicts itself")
        self.db.execute(
            "UPDATE {sides} SET contract = ?, documents = ?, length = ?, total = ?, "
            "version = version + 1 WHERE side = ?",
            (contract.to_json(), len(index), length, f"{total:064x}", side),
        )

    def drop(self) -> None:
        """Remove the side (its rows and its stamp)."""
        side = self.side()
        if side is None:
            return
        with self.db.writing():
            for table in ("{postings}", "{docs}", "{terms}", "{pending}", "{sides}"):
                self.db.execute(f"DELETE FROM {table} WHERE side = ?", (side,))
        self._side = None

    def set_contract(self, contract: HybridContract) -> HybridStamp:
        """Stamp ``contract`` (same fitted lexical side; a fusion change)."""
        with self.db.writing():
            stamp = self.stamp(lock=True)
            if contract.lexical != stamp.contract.lexical:
                raise InvalidInputError("only the fusion of a stamped lexical side is changed here")
            self.db.execute(
                "UPDATE {sides} SET contract = ?, version = version + 1 WHERE side = ?",
                (contract.to_json(), self.side()),
            )
        return self.stamp()

    def set_schema(self) -> HybridStamp:
        """Record the side's rows as :data:`STORE_SCHEMA`'s (once they are brought to it)."""
        with self.db.writing():
            self.stamp(lock=True)
            self.db.execute(
                "UPDATE {sides} SET schema = ?, version = version + 1 WHERE side = ?",
                (STORE_SCHEMA, self.side()),
            )
        return self.stamp()

    # -- writing ----------------------------------------------------------------------------

    def intend(self, ids: Sequence[str]) -> None:
        """Record that ``ids`` are about to be written to the dense side (a store that shares
        no transaction with this one): :meth:`apply` of them clears it; a writer that stops in
        between leaves them for :meth:`pending`."""
        side = self.side()
        with self.db.writing():
            self.db.executemany(
                "INSERT INTO {pending} (side, id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [(side, i) for i in dict.fromkeys(ids)],
            )

    def pending(self) -> list[str]:
        """Ids a writer recorded and did not write to this side (it stopped, or is writing)."""
        rows = self.db.execute("SELECT id FROM {pending} WHERE side = ?", (self.side(),))
        return sorted(str(r[0]) for r in rows)

    def apply(
        self,
        upserts: Sequence[tuple[str, str, str]],
        deletes: Sequence[str] = (),
        *,
        expect: str | None = None,
    ) -> HybridStamp:
        """Write ``(id, text digest, text)`` rows and delete ids, in one transaction holding the
        side: only documents whose digest differs are analysed again; postings, document and
        term frequencies and the statistics change by what changed.

        ``expect``: the recipe fingerprint the writer states; a side stamped with another
        (changed by another process since it was opened) is refused.
        """
        with self.db.writing():
            stamp = self.stamp(lock=True)
            if expect is not None and not same_contract(
                stamp.contract.lexical.recipe(), expect, exact=True
            ):
                raise StampError(
                    f"the lexical side in {self.where} was re-stamped under another recipe "
                    "while it was open; open it again"
                )
            done = self._apply(stamp, upserts, deletes)
            ids = [*(u[0] for u in upserts), *deletes]
            for part in _chunks(ids):
                clause, params = self.db.any_of("id", part)
                self.db.execute(
                    f"DELETE FROM {{pending}} WHERE side = ? AND {clause}",
                    (self.side(), *params),
                )
            return done

    def _apply(
        self,
        stamp: HybridStamp,
        upserts: Sequence[tuple[str, str, str]],
        deletes: Sequence[str],
    ) -> HybridStamp:
        side = self.side()
        db = self.db
        wanted = {i: (d, t) for i, d, t in upserts}
        gone_ids = [i for i in dict.fromkeys(deletes) if i not in wanted]
        have = self._docs([*wanted, *gone_ids])
        changed = [i for i in wanted if have.get(i, (0, None, 0))[1] != wanted[i][0]]
        removed = [i for i in gone_ids if i in have]
        if not changed and not removed:
            return stamp
        delta: dict[str, list[int]] = {}
        old = [have[i][0] for i in [*changed, *removed] if i in have]
        for part in _chunks(old):
            clause, params = db.any_of("num", part)
            rows = db.execute(
                f"SELECT term, tf FROM {{postings_by_num}} WHERE side = ? AND {clause}",
                (side, *params),
            )
            for term, tf in rows:
                d = delta.setdefault(term, [0, 0])
                d[0] -= 1
                d[1] -= int(tf)
            db.execute(
                f"DELETE FROM {{postings}} WHERE side = ? AND {clause}",
                (side, *params),
            )
        for part in _chunks([have[i][0] for i in removed]):
            clause, params = db.any_of("num", part)
            db.execute(f"DELETE FROM {{docs}} WHERE side = ? AND {clause}", (side, *params))
        documents = stamp.documents - len(removed)
        length = stamp.length - sum(have[i][2] for i in [*changed, *removed] if i in have)
        analyzer = self.analyzer(stamp)
        nxt = int(
            db.execute("SELECT coalesce(max(num), 0) FROM {docs} WHERE side = ?", (side,))[0][0]
        )
        new_docs, updated_docs, postings = [], [], []
        for i in changed:
            digest, text = wanted[i]
            counts = Counter(analyzer.terms(text))
            size = sum(counts.values())
            if i in have:
                num = have[i][0]
                updated_docs.append((digest, size, side, num))
            else:
                nxt += 1
                num = nxt
                new_docs.append((side, num, i, digest, size))
                documents += 1
            length += size
            for term, tf in counts.items():
                postings.append((side, term, num, tf))
                d = delta.setdefault(term, [0, 0])
                d[0] += 1
                d[1] += tf
        if updated_docs:
            db.executemany(
                "UPDATE {docs} SET digest = ?, length = ? WHERE side = ? AND num = ?", updated_docs
            )
        if new_docs:
            db.executemany(
                "INSERT INTO {docs} (side, num, id, digest, length) VALUES (?, ?, ?, ?, ?)",
                new_docs,
            )
        if postings:
            db.executemany(
                "INSERT INTO {postings} (side, term, num, tf) VALUES (?, ?, ?, ?)", postings
            )
        total = self._terms(side, delta, stamp.total)
        fitted = stamp.contract.lexical.with_(
            vocabulary=vocabulary_digest(documents, length, total), documents=documents
        )
        contract = stamp.contract.with_(lexical=fitted)
        db.execute(
            "UPDATE {sides} SET contract = ?, documents = ?, length = ?, total = ?, "
            "version = version + 1 WHERE side = ?",
            (contract.to_json(), documents, length, f"{total:064x}", side),
        )
        return HybridStamp(
            contract, stamp.analyzer_canary, stamp.owner, stamp.token, documents, length, total,
            stamp.version + 1,
        )  # fmt: skip

    def _terms(self, side: int | None, delta: dict[str, list[int]], total: int) -> int:
        """Apply the document and total frequency changes to the terms table (in term order,
        so that two writers never wait on each other's rows in turn); the new terms sum."""
        touched = sorted(t for t, d in delta.items() if d != [0, 0])
        old: dict[str, tuple[int, int]] = {}
        for part in _chunks(touched):
            clause, params = self.db.any_of("term", part)
            for term, df, cf in self.db.execute(
                f"SELECT term, df, cf FROM {{terms}} WHERE side = ? AND {clause}",
                (side, *params),
            ):
                old[term] = (int(df), int(cf))
        inserts: list[tuple[str, int, int]] = []
        updates: list[tuple[str, int, int]] = []
        deletes: list[str] = []
        for term in touched:
            df, cf = old.get(term, (0, 0))
            new_df, new_cf = df + delta[term][0], cf + delta[term][1]
            if new_df < 0 or new_cf < 0 or (new_df == 0) != (new_cf == 0):
                raise REBUILD_LEXICAL_SIDE.into(
                    DamagedStampError,
                    f"the lexical side in {self.where} counts term {term!r} in fewer documents "
                    "than it holds (edited around ctxemb); rebuild it ({do})",
                )
            if term in old:
                total -= term_hash(term, df, cf)
            if new_df:
                total += term_hash(term, new_df, new_cf)
                (updates if term in old else inserts).append((term, new_df, new_cf))
            elif term in old:
                deletes.append(term)
        if updates:
            self.db.executemany(
                "UPDATE {terms} SET df = ?, cf = ? WHERE side = ? AND term = ?",
                [(df, cf, side, t) for t, df, cf in updates],
            )
        if inserts:
            self.db.executemany(
                "INSERT INTO {terms} (side, term, df, cf) VALUES (?, ?, ?, ?)",
                [(side, t, df, cf) for t, df, cf in inserts],
            )
        for part in _chunks(deletes):
            clause, params = self.db.any_of("term", part)
            self.db.execute(
                f"DELETE FROM {{terms}} WHERE side = ? AND {clause}",
                (side, *params),
            )
        return total % HASH_MODULUS

    def _docs(self, ids: Sequence[str]) -> dict[str, tuple[int, str, int]]:
        """``id -> (num, digest, length)`` of the stored ones of ``ids``."""
        out: dict[str, tuple[int, str, int]] = {}
        for part in _chunks(list(ids)):
            clause, params = self.db.any_of("id", part)
            for i, num, digest, length in self.db.execute(
                f"SELECT id, num, digest, length FROM {{docs_by_id}} WHERE side = ? AND {clause}",
                (self.side(), *params),
            ):
                out[i] = (int(num), str(digest), int(length))
        return out

    # -- reading ----------------------------------------------------------------------------

    def count(self) -> int:
        rows = self.db.execute("SELECT documents FROM {sides} WHERE side = ?", (self.side(),))
        return int(rows[0][0]) if rows else 0

    def __len__(self) -> int:
        return self.count()

    def digests(self, ids: Sequence[str] | None = None) -> dict[str, str]:
        """Each stored id's text digest (of ``ids`` only, when given)."""
        if ids is not None:
            return {i: d for i, (_, d, _) in self._docs(ids).items()}
        rows = self.db.execute(
            "SELECT id, digest FROM {docs} WHERE side = ? ORDER BY num", (self.side(),)
        )
        return {str(i): str(d) for i, d in rows}

    def ids(self) -> list[str]:
        """The stored ids, oldest write first."""
        return list(self.digests())

    def search(
        self, query: str, k: int, stamp: HybridStamp | None = None
    ) -> tuple[list[tuple[str, float]], HybridStamp]:
        """The ``k`` best documents sharing a term with ``query``: ``(id, score)``, best first,
        ties oldest first; and the stamp they were scored under (read in the same snapshot).

        The scores are :meth:`LexicalIndex.scores`' over the same documents, bit for bit: each
        posting's weight in float64 rounded to float32, summed in float32 in query-term order.
        """
        with self.db.reading():
            now = self.stamp()
            if stamp is not None and now.version == stamp.version:
                now = stamp
            terms = self.analyzer(now).terms(query)
            unique = sorted(set(terms))
            found: list[tuple[Any, ...]] = []
            side = self.side()
            for part in _chunks(unique):
                clause, params = self.db.any_of("p.term", part)
                found += self.db.execute(
                    "SELECT p.term, p.num, p.tf, d.length FROM {postings} p JOIN {docs} d ON "
                    f"d.side = p.side AND d.num = p.num WHERE p.side = ? AND {clause}",
                    (side, *params),
                )
            hits = self._rank(now, terms, found, k)
            names = self._names([n for n, _ in hits])
        if len(names) != len(hits):
            raise DamagedStampError(f"the lexical side in {self.where} lost documents mid-read")
        return [(names[n], s) for n, s in hits], now

    def _rank(
        self, stamp: HybridStamp, terms: list[str], found: list[tuple[Any, ...]], k: int
    ) -> list[tuple[int, float]]:
        if not found or not stamp.documents:
            return []
        c = stamp.contract.lexical
        term_col = np.array([r[0] for r in found], dtype=object)
        nums = np.fromiter((r[1] for r in found), dtype=np.int64, count=len(found))
        tf = np.fromiter((r[2] for r in found), dtype=np.float64, count=len(found))
        lengths = np.fromiter((r[3] for r in found), dtype=np.int32, count=len(found))
        docs, position = np.unique(nums, return_inverse=True)
        n = stamp.documents
        avg = (stamp.length / n) or 1.0
        weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term in set(terms):
            mask = term_col == term
            if not mask.any():
                continue
            df = float(mask.sum())
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
            t = tf[mask]
            norm = c.k1 * (1.0 - c.b + c.b * lengths[mask] / avg)
            weights[term] = (position[mask], (idf * t / (t + norm)).astype(np.float32))
        scores = np.zeros(len(docs), dtype=np.float32)
        for term in terms:
            if term in weights:
                at, w = weights[term]
                scores[at] += w
        hits = np.flatnonzero(scores > 0)
        if hits.size > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        order = hits[np.lexsort((docs[hits], -scores[hits]))]
        return [(int(docs[i]), float(scores[i])) for i in order[:k]]

    def _names(self, nums: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for part in _chunks(nums):
            clause, params = self.db.any_of("num", part)
            for num, i in self.db.execute(
                f"SELECT num, id FROM {{docs}} WHERE side = ? AND {clause}",
                (self.side(), *params),
            ):
                out[int(num)] = str(i)
        return out

    def lengths_agree(self) -> list[str]:
        """Ids whose stored length is not the sum of their postings (a full scan: verify)."""
        side = self.side()
        with self.db.reading():
            sums = dict(
                self.db.execute(
                    "SELECT num, sum(tf) FROM {postings} WHERE side = ? GROUP BY num", (side,)
                )
            )
            docs = self.db.execute("SELECT num, id, length FROM {docs} WHERE side = ?", (side,))
        return sorted(str(i) for num, i, n in docs if int(sums.get(num, 0)) != int(n))


class ServerLexical:
    """A lexical side in tables of the database server that holds its dense index (every side
    of a schema in one set of :data:`SQL_TABLES`), written in the dense rows' own transactions,
    which hold the side's row (``FOR UPDATE``): the :class:`Dialect` of a connection with
    ``execute`` and ``cursor`` (psycopg's), ``?`` run as ``%s``, the same for every such store.

    Which dense indexes were given a side, each with its token, is a table of marks
    (:data:`MARKS`, ``{marks}``, keyed by the index's identity in column ``{marked}``), so a
    side whose rows were deleted is found lost, never taken for none yet.

    A store gives ``names`` (each key of :data:`TABLES` and ``marks`` as its SQL names the
    table, ``marked``, and ``docs_by_id`` / ``postings_by_num``), :attr:`tables` (the
    statements: :data:`SQL_TABLES` and the marks table's), :meth:`_translated`, :meth:`_exists`,
    :meth:`_transaction`, :meth:`_lock_tables`, :meth:`any_of` and :meth:`reading`.
    """

    lock = " FOR UPDATE"
    single = False
    #: The tables' statements, named as queries name them.
    tables = SQL_TABLES

    def __init__(self, conn: Any, name: str, where: str, names: dict[str, str]) -> None:
        self.conn, self.name, self.where = conn, name, where
        self._names = names

    @staticmethod
    def _translated(what: str) -> contextlib.AbstractContextManager[None]:
        """The database's errors as ctxemb's while ``what`` runs."""
        raise NotImplementedError

    def _exists(self, table: str) -> bool:
        """Whether the database has ``table``."""
        raise NotImplementedError

    def _transaction(self, what: str) -> contextlib.AbstractContextManager[None]:
        """One transaction, the connection held for all of it, its errors translated."""
        raise NotImplementedError

    def _lock_tables(self) -> None:
        """Until the transaction ends: two creators of the tables or of sides take turns."""
        raise NotImplementedError

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` among ``values``, as the database takes a list."""
        raise NotImplementedError

    def reading(self) -> contextlib.AbstractContextManager[None]:
        """One snapshot for a search's reads (the statistics and the postings they score)."""
        raise NotImplementedError

    def sql(self, query: str) -> str:
        return query.format(**self._names).replace("?", "%s")

    def present(self) -> bool:
        return self._exists(SIDES)

    def mark(self, identity: Any) -> str | None:
        """The token recorded for the dense index of ``identity``, or ``None``."""
        if not self._exists(MARKS):
            return None
        rows = self.execute("SELECT token FROM {marks} WHERE {marked} = ?", (identity,))
        return str(rows[0][0]) if rows else None

    def set_mark(self, identity: Any, token: str) -> None:
        self.create_tables()
        self.execute(
            "INSERT INTO {marks} ({marked}, token) VALUES (?, ?) "
            "ON CONFLICT ({marked}) DO UPDATE SET token = EXCLUDED.token",
            (identity, token),
        )

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._translated(f"the lexical side of {self.name!r}"):
            cur = self.conn.execute(self.sql(query), tuple(params))
            return list(cur.fetchall()) if cur.description is not None else []

    def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        writing = self._translated(f"writing the lexical side of {self.name!r}")
        with writing, contextlib.closing(self.conn.cursor()) as cur:
            cur.executemany(self.sql(query), rows)

    def create_tables(self) -> None:
        with self._transaction("creating the lexical tables"):
            self._lock_tables()
            for statement in self.sql(self.tables).split(";"):
                if statement.strip():
                    self.conn.execute(statement)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction(f"the lexical side of {self.name!r}")

    @contextlib.contextmanager
    def creating(self) -> Iterator[None]:
        with self.writing():
            self._lock_tables()
            yield


def _chunks(values: Sequence[Any]) -> Iterator[list[Any]]:
    values = list(values)
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


# -- SQLite ----------------------------------------------------------------------------------

_SQLITE_TABLES = f"""
CREATE TABLE IF NOT EXISTS {SIDES} (
  side INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, schema INTEGER NOT NULL,
  owner TEXT NOT NULL, token TEXT NOT NULL, contract TEXT NOT NULL, canary TEXT NOT NULL,
  documents INTEGER NOT NULL, length INTEGER NOT NULL, total TEXT NOT NULL,
  version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS {DOCS} (
  side INTEGER NOT NULL, num INTEGER NOT NULL, id TEXT NOT NULL, digest TEXT NOT NULL,
  length INTEGER NOT NULL, PRIMARY KEY (side, num)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS {DOCS}_id ON {DOCS} (side, id);
CREATE TABLE IF NOT EXISTS {POSTINGS} (
  side INTEGER NOT NULL, term TEXT NOT NULL, num INTEGER NOT NULL, tf INTEGER NOT NULL,
  PRIMARY KEY (side, term, num)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {POSTINGS}_num ON {POSTINGS} (side, num);
CREATE TABLE IF NOT EXISTS {TERMS} (
  side INTEGER NOT NULL, term TEXT NOT NULL, df INTEGER NOT NULL, cf INTEGER NOT NULL,
  PRIMARY KEY (side, term)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {PENDING} (
  side INTEGER NOT NULL, id TEXT NOT NULL, PRIMARY KEY (side, id)) WITHOUT ROWID;
"""
_NAMES = {
    **TABLES,
    # Without statistics SQLite's planner reads "side = ? AND id IN (...)" by the primary key's
    # side prefix, every row of the side; these lookups name the index that answers them.
    "docs_by_id": f"{DOCS} INDEXED BY {DOCS}_id",
    "postings_by_num": f"{POSTINGS} INDEXED BY {POSTINGS}_num",
}


class SQLiteLexical:
    """A lexical side in ``FOLDER/lexical.sqlite3`` (WAL: readers never wait for a writer;
    writers take turns, ``BEGIN IMMEDIATE``). One side per file: the folder belongs to one
    dense index, which the side records.

    Args:
        folder: the side's folder (created with the side).
        name: the dense index's name.
    """

    lock = ""
    single = True

    def __init__(self, folder: str | os.PathLike[str], name: str) -> None:
        self.folder = Path(folder)
        self.path = self.folder / SQLITE_FILE
        self.name = name
        self.where = str(self.folder)
        self._conn: sqlite3.Connection | None = None
        self._depth = 0
        # One connection, one transaction at a time: threads sharing a hybrid index take turns.
        self._lock = threading.RLock()

    def present(self) -> bool:
        """Whether the file exists with its tables (a side may still be missing from it)."""
        if self._conn is None and not self.path.is_file() and not self.path.is_symlink():
            return False
        rows = self.execute("SELECT name FROM sqlite_master WHERE name = ?", (SIDES,))
        return bool(rows)

    def conn(self, *, create: bool = False) -> sqlite3.Connection:
        if self._conn is None:
            if self.path.is_symlink():
                raise DamagedStampError(
                    f"{self.path} is a symbolic link: a lexical side is a file of its own "
                    "folder, never another's; remove the link"
                )
            if not create and not self.path.is_file():
                raise MissingStampError(f"{self.folder} holds no lexical side ({SQLITE_FILE})")
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self.path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                # Postings are written where their terms are: a page cache of some size keeps
                # a write of a few documents from reading the pages it touches from the file.
                conn.execute("PRAGMA cache_size = -65536")
            except (OSError, sqlite3.Error) as exc:
                raise StoreUnavailableError(
                    f"the lexical side's file {self.path} cannot be opened: {exc}"
                ) from None
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def sql(self, query: str) -> str:
        return query.format(**_NAMES)

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self.conn().execute(self.sql(query), tuple(params)).fetchall()
            except sqlite3.DatabaseError as exc:
                raise _sqlite_error(self.path, exc) from None

    def executemany(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._lock:
            try:
                self.conn().executemany(self.sql(query), rows)
            except sqlite3.DatabaseError as exc:
                raise _sqlite_error(self.path, exc) from None

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} IN ({', '.join('?' * len(values))})", list(values)

    def create_tables(self) -> None:
        try:
            self.conn(create=True).executescript(_SQLITE_TABLES)
        except sqlite3.DatabaseError as exc:
            raise _sqlite_error(self.path, exc) from None

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[None]:
        with self._lock:
            yield from self._within(begin)

    def _within(self, begin: str) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        conn = self.conn()
        try:
            conn.execute(begin)
        except sqlite3.DatabaseError as exc:
            raise _sqlite_error(self.path, exc) from None
        self._depth = 1
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                conn.execute("ROLLBACK")
                raise _sqlite_error(self.path, exc) from None
        finally:
            self._depth = 0

    def writing(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction("BEGIN IMMEDIATE")

    def creating(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction("BEGIN IMMEDIATE")

    def reading(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction("BEGIN")


def _sqlite_error(path: Path, exc: sqlite3.DatabaseError) -> CtxembError:
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return StoreUnavailableError(f"the lexical side {path} stayed locked by another writer")
    return DamagedStampError(f"the lexical side {path} cannot be read as one: {exc}")


# -- the old file set -------------------------------------------------------------------------

FILE_SET_FILES = ("documents.json", "vocabulary.json", "postings.npz")


def has_file_set(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds (part of) an old file-set side: a ``current`` pointer or a
    version folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return False
    return (folder / "current").exists() or any(
        p.name.startswith("v-") and p.is_dir() for p in folder.iterdir()
    )


def read_file_set(folder: str | os.PathLike[str]) -> tuple[LexicalIndex, HybridContract, str]:
    """An old file-set side (ctxemb 0.1): its index, its stamped contract and its analyzer
    canary, each file's digest and the manifest checked, the pointer a plain file naming one of
    the folder's own version folders.

    Raises:
        DamagedStampError: a pointer that is missing (version folders without one), a link, or
            names no version; a manifest or file that is not what it records.
    """
    folder = Path(folder)
    pointer = folder / "current"
    if pointer.is_symlink() or (pointer.exists() and not pointer.is_file()):
        raise DamagedStampError(
            f"the lexical pointer {pointer} is not a file of its own folder: it is never "
            "followed, and the side is never rebuilt under a default recipe in its place"
        )
    try:
        version = json.loads(pointer.read_text(encoding="utf-8"))["version"]
    except FileNotFoundError:
        raise REBUILD_LEXICAL_SIDE.into(
            DamagedStampError,
            f"{folder} holds version folders of a lexical side but no 'current' pointer: the "
            "stamped version cannot be told, and a side is never rebuilt under a default recipe "
            "in its place. Restore the pointer, or remove the folder and rebuild ({do})",
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DamagedStampError(f"the lexical pointer {pointer} is damaged: {exc}") from None
    if not isinstance(version, str) or not re.fullmatch(r"v-[0-9a-f]{16}", version):
        raise DamagedStampError(f"the lexical pointer {pointer} is damaged")
    where = folder / version
    if where.is_symlink() or not where.is_dir():
        raise DamagedStampError(f"the lexical version {where} named by {pointer} is missing")
    try:
        manifest = json.loads((where / "manifest.json").read_text(encoding="utf-8"))
        contract = HybridContract.from_json(manifest["contract"])
        if manifest["schema"] != 1 or not same_contract(
            contract, manifest["fingerprint"], exact=True
        ):
            raise ValueError("schema or fingerprint")
        for name in FILE_SET_FILES:
            if sha256_file(where / name) != manifest["files"][name]:
                raise ValueError(f"{name} is not the file its manifest records")
        documents = json.loads((where / "documents.json").read_text(encoding="utf-8"))
        vocabulary = json.loads((where / "vocabulary.json").read_text(encoding="utf-8"))
        with np.load(where / "postings.npz", allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in ("indptr", "postings", "frequencies", "lengths")}
        index = LexicalIndex.from_parts(contract.lexical, documents, vocabulary, arrays)
        canary = str(manifest["analyzer_canary"])
    except (OSError, ValueError, KeyError, TypeError, IndexError, DataFormatError) as exc:
        raise DamagedStampError(f"the old lexical side in {where} cannot be read: {exc}") from None
    if len(index) != manifest.get("count") or index.state != manifest.get("state"):
        raise DamagedStampError(f"the old lexical side in {where} contradicts its manifest")
    # Its fitted vocabulary digest (0.1's: a sha256 of the term table), recomputed from the
    # postings, must be the stamp's: a manifest re-written over edited postings does not pass.
    table = json.dumps(
        [
            len(index),
            int(index.lengths.sum()),
            [[t, int(n)] for t, n in zip(index.vocabulary, np.diff(index.indptr), strict=True)],
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    found = "sha256:" + hashlib.sha256(table.encode("utf-8", "surrogatepass")).hexdigest()
    counted = np.bincount(index.postings, weights=index.frequencies, minlength=len(index)).astype(
        np.int64
    )
    if (
        found != contract.lexical.vocabulary
        or contract.lexical.documents != len(index)
        or not np.array_equal(counted, index.lengths.astype(np.int64))
    ):
        raise REBUILD_LEXICAL_SIDE.into(
            DamagedStampError,
            f"the postings in {where} are not the vocabulary its stamp was fitted on (edited "
            "after it was written); rebuild it ({do})",
        )
    refit = LexicalIndex._from_counts(
        contract.lexical.recipe(), index.ids, index.digests, index.counts()
    )
    return refit, contract.with_(lexical=refit.contract), canary


def new_token() -> str:
    return uuid.uuid4().hex
