"""The conformance suite every store driver passes: what "a store ctxemb guards" means.

As ``langchain_tests`` is for LangChain, this is a pytest base class a driver's author
subclasses in their own tests, giving two fixtures; every guarantee the docs make is then
proven against their store through :class:`~ctxemb_core.index.GuardedIndex`::

    import pytest
    from ctxemb_core.index import MemoryStore
    from ctxemb_core.testing.conformance import DriverConformance


    class TestMyStore(DriverConformance):
        @pytest.fixture
        def new_driver(self):
            store = MemoryStore()  # a fresh, empty place for one index
            return lambda: store.driver("docs")  # a new handle onto it per call

        @pytest.fixture
        def raw(self, new_driver):
            return new_driver().store.raw("docs")  # the store's own client, around the guard

``new_driver`` returns a function that makes a new driver handle onto one fresh index, not yet
created (called from several threads at once by the concurrency test: a new connection each
time where the store has connections). ``raw`` is a :class:`RawAccess`: what a user's own
client does around ctxemb (the tests tamper through it). A store that cannot hold some raw
records, or keeps vectors only within a rounding, declares it
(:attr:`DriverConformance.unstorable`, :attr:`DriverConformance.vector_tolerance`). The
``embedder`` fixture gives a tiny static model built in code (no download, no torch;
:func:`tiny_embedder`); override it to run the suite under another contract.

What is proven, for each driver: a new index is stamped in the step that makes it, and of
several concurrent creators one makes it (concurrent indexers of one corpus add each record
once); each contract field is refused on open, on write and
on query, nothing written or returned; a stamp tampered with or missing is refused; records
written around the guard (a foreign vector, a record without text or vector, with a write
mark also one rewritten in place) are caught on the next open; a write that fails or is
interrupted leaves nothing half-written; the sync rules; adopt, verify and re-stamp; a copy
into and out of another driver (the reference in-memory one) bit for bit, resumable, a copy
stopped half-way refused on every open until a migration of its source finishes it. And each
primitive the guard relies on, called directly: a write, delete or ``write_stamp`` at a stale
stamp version refused with nothing changed, a stamp written keeping the index's own metadata
keys, a delete returning exactly the ids it deleted, ``read`` in the order given, a search of
at most ``k`` hits at their distance in the driver's space, ``ids`` and ``page`` past an offset
(and ``page_near`` a run of the store's order, where a driver seeks);
and the refusals of an open index worded in the driver's ``terms``, never the default store's.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pytest

from ctxemb_core._version import __version__ as ctxemb_version
from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    ExistingIdsError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
    StampMovedError,
    StoreUnavailableError,
    UnfinishedCopyError,
)
from ctxemb_core.index.driver import INCLUDE, Record, StoreDriver
from ctxemb_core.index.guarded import GuardedIndex, restamp_index, verify_driver
from ctxemb_core.index.memory import MemoryDriver, MemoryStore
from ctxemb_core.index.migrate import migrate_index
from ctxemb_core.records import storable
from ctxemb_core.remedy import DEFAULT_TERMS, StoreTerms
from ctxemb_core.resolve import contract_for
from ctxemb_core.stamp import PROBES, IndexStamp
from ctxemb_core.stamp_guard import restamp_stamp
from ctxemb_core.static import static_from_vectors
from ctxemb_core.sync import SyncReport

__all__ = ["DOCS", "FIELDS", "DriverConformance", "RawAccess", "tiny_embedder", "variants"]

#: The corpus every test indexes (id -> text), with metadata ``{"n": k}``.
DOCS = {
    "tea": "Green tea leaves are steamed soon after picking.",
    "bike": "Oil the bicycle chain after riding in rain.",
    "moon": "The moon phases follow its orbit around the earth.",
    "slugs": "Slugs eat lettuce at night in the garden.",
    "bank": "The central bank raised interest rates again.",
}
QUERY = "how is green tea made"

# Every word of the probes' texts a static model must know (a canary of zeros proves nothing).
_WORDS = " ".join(
    (
        "the quick brown fox jumps over lazy dog what is boiling point of water at sea level "
        "mitochondria produce atp through oxidative phosphorylation in eukaryotic cells a process "
        "that depends on proton gradient across inner membrane café prices rose según el informe "
        "por qué green tea leaves are steamed soon after picking oil bicycle chain riding rain "
        "moon phases follow its orbit around earth slugs eat lettuce night garden central bank "
        "raised interest rates again how made fresh text replaced record number about topic",
    )
).split()

#: The contract fields each refusal test is run for.
FIELDS = (
    "pooling",
    "query_prefix",
    "document_prefix",
    "normalize",
    "truncate_dim",
    "max_tokens",
    "precision",
    "layers",
    "include_prompt",
    "weights",
    "model",
)


class RawAccess(Protocol):
    """A user's own client of the index, around the guard (what the suite tampers through)."""

    def create(self, metadata: Mapping[str, Any] | None = None) -> None:
        """Make the index without ctxemb: no stamp (unless ``metadata`` holds one)."""
        ...

    def write(self, records: Sequence[Record]) -> None:
        """Upsert records as given, with no check of any kind (the store's own write mark,
        where it keeps one, moves as for any write). A record the store itself cannot hold
        (a vector of another width in a column of one width) raises, whatever the type: its
        kind is declared in :attr:`DriverConformance.unstorable`."""
        ...

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Replace the index's metadata (its stamp) whole."""
        ...

    def drop(self) -> None:
        """Drop the index (its name is then free for another)."""
        ...

    def failing_writes(
        self, after: int, error: BaseException | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Within the block, the store's next write fails once ``after`` records of it reached
        the store (``error``, or a :class:`StoreUnavailableError`)."""
        ...


# -- the embedder and the contracts it is held against -----------------------------------------


def _static_model(folder: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [w + " " + " ".join(f"{v:.5f}" for v in rng.normal(size=16)) for w in _WORDS]
    (folder / "vectors.txt").write_text("\n".join(lines), encoding="utf-8")
    return static_from_vectors(folder / "vectors.txt", folder / "model")


def _build_models(folder: Path) -> Path:
    for name, seed in (("a", 0), ("b", 1), ("c", 2)):
        _static_model(folder / name, seed)
    return folder


@functools.lru_cache(maxsize=1)
def _models() -> tuple[Path, Path, Path]:
    # Static models (milliseconds to build, no torch), built once per user and version of
    # what they hold into one folder of the temporary directory, which every later process
    # reuses. A folder per process, removed at exit, was left behind by every process that
    # was killed (a suite's servers and helpers: dozens a day).
    key = hashlib.sha256(f"{_WORDS}|0,1,2|{ctxemb_version}".encode()).hexdigest()[:16]
    base = Path(tempfile.gettempdir()) / f"ctxemb-conformance-{_user()}-{key}"
    if not _ours(base):
        building = _build_models(
            Path(tempfile.mkdtemp(prefix=base.name + ".building-", dir=base.parent))
        )
        try:
            building.rename(base)  # whole, or not there at all
        except OSError:  # another process's is there now
            shutil.rmtree(building, ignore_errors=True)
        if not _ours(base):  # another user's, under our name: a folder of this process's own
            base = Path(tempfile.mkdtemp(prefix="ctxemb-conformance-"))
            atexit.register(shutil.rmtree, base, ignore_errors=True)
            _build_models(base)
    return base / "a" / "model", base / "b" / "model", base / "c" / "model"


def _user() -> str:
    getuid = getattr(os, "getuid", None)
    return str(getuid()) if getuid else "user"


def _ours(folder: Path) -> bool:
    """``folder`` is a whole set of the models, made by this user (no one else could write it)."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    getuid = getattr(os, "getuid", None)
    owned = getuid is None or (info.st_uid == getuid() and not info.st_mode & 0o022)
    return owned and stat.S_ISDIR(info.st_mode) and (folder / "c" / "model").is_dir()


def tiny_embedder() -> Embedder:
    """A tiny static model (16 dimensions, a few hundred words) built in code, its embedder."""
    return Embedder(contract_for(_models()[0], name="ctxemb/conformance-static"))


def variants(contract: EmbeddingContract) -> dict[str, EmbeddingContract]:
    """One contract per field of :data:`FIELDS`, each differing from ``contract`` in it.

    ``weights`` is another static model under the same name; ``model`` another model under
    another name (a name alone over the same weights is the same contract).
    """
    _, other_weights, other_model = _models()
    half = max(1, contract.output_dim // 2)
    out = {
        "pooling": contract.with_(pooling="cls" if contract.pooling.value != "cls" else "mean"),
        "query_prefix": contract.with_(query_prefix=contract.query_prefix + "query: "),
        "document_prefix": contract.with_(document_prefix=contract.document_prefix + "passage: "),
        "normalize": contract.with_(normalize=not contract.normalize),
        "truncate_dim": contract.with_(truncate_dim=half),
        "max_tokens": contract.with_(max_tokens=max(1, contract.max_tokens // 2)),
        "precision": contract.with_(
            precision="float16" if contract.precision.value != "float16" else "float32"
        ),
        "layers": contract.with_(layers="-2" if contract.layers != "-2" else "last"),
        "include_prompt": contract.with_(include_prompt=not contract.include_prompt),
        "weights": contract_for(other_weights, name=contract.model),
        "model": contract_for(other_model, name=contract.model + "-other"),
    }
    return {f: c for f, c in out.items() if f in contract.diff(c).fields}


def foreign_stamp(contract: EmbeddingContract) -> IndexStamp:
    """A well-formed stamp of ``contract`` (its canary random: refused before it is compared)."""
    rng = np.random.default_rng(0)
    canary = rng.normal(size=(2 * len(PROBES), contract.output_dim)).astype(np.float32)
    return IndexStamp(contract, PROBES, canary)


class _Near:
    """A stored vector, equal (``==``) to another within ``tolerance`` of its length."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, vector: np.ndarray, tolerance: float) -> None:
        self.vector = vector
        self.tolerance = tolerance

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Near) or other.vector.shape != self.vector.shape:
            return False
        worst = float(np.abs(self.vector - other.vector).max(initial=0.0))
        return worst <= self.tolerance * max(float(np.linalg.norm(self.vector)), 1e-30)

    def __repr__(self) -> str:
        return f"_Near({self.vector!r}, {self.tolerance:g})"


def snapshot(driver: StoreDriver, tolerance: float = 0.0) -> tuple[Any, ...]:
    """Everything the index holds, comparable with ``==`` (read around the guard): vectors bit
    for bit, or within ``tolerance`` of their length."""
    read = driver.read_stamp()
    if read is None:
        return (None,)
    records = []
    for r in driver.page(0, driver.count() + 1, INCLUDE):
        vector: Any = None
        if r.vector is not None:
            stored = np.asarray(r.vector, dtype=np.float32)
            vector = _Near(stored, tolerance) if tolerance else stored.tobytes()
        meta = None if r.metadata is None else sorted(r.metadata.items())
        records.append((r.id, vector, r.text, meta))
    return IndexStamp.metadata_items(read.metadata), sorted(records, key=lambda t: t[0])


# -- the suite ------------------------------------------------------------------------------------


class DriverConformance:
    """Subclass with fixtures ``new_driver`` and ``raw`` (see the module's docstring)."""

    #: The kinds of raw record (``"no vector"``, ``"another width"``) the store itself refuses
    #: to hold (Chroma keeps none without a vector, and one width per collection): for those
    #: the suite checks that the raw client's write is refused and leaves the index as it was.
    unstorable: frozenset[str] = frozenset()
    #: How far a vector read back may be from the one written, relative to its length (0: bit
    #: for bit). Chroma re-normalises the vectors of a cosine collection on write (float32
    #: rounding): :data:`ctxemb_core.migrate.COPY_TOLERANCE`.
    vector_tolerance: float = 0.0

    def snapshot(self, driver: StoreDriver) -> tuple[Any, ...]:
        """:func:`snapshot`, vectors compared within :attr:`vector_tolerance`."""
        return snapshot(driver, self.vector_tolerance)

    def refused_raw(self, docs: GuardedIndex, raw: RawAccess, record: Record) -> None:
        """A raw write of a record the store cannot hold is refused, nothing written."""
        before = self.snapshot(docs.driver)
        try:
            raw.write([record])
        except Exception:  # the store's own refusal, whatever its type
            pass
        else:
            pytest.fail("the store took a record declared unstorable")
        assert self.snapshot(docs.driver) == before
        assert GuardedIndex.open(docs.driver, docs.embedder).count() == len(DOCS)

    # -- fixtures a driver's author gives ------------------------------------------------

    @pytest.fixture
    def new_driver(self) -> Callable[[], StoreDriver]:
        """A function making a new driver handle onto one fresh, not yet created index."""
        raise NotImplementedError("give a new_driver fixture: a fresh index's driver factory")

    @pytest.fixture
    def raw(self, new_driver: Callable[[], StoreDriver]) -> RawAccess:
        """The store's own client of that index (around the guard)."""
        raise NotImplementedError("give a raw fixture: the store's own client of the index")

    # -- fixtures of the suite (override embedder to use another contract) -----------------

    @pytest.fixture
    def embedder(self) -> Embedder:
        return tiny_embedder()

    @pytest.fixture
    def driver(self, new_driver: Callable[[], StoreDriver]) -> StoreDriver:
        return new_driver()

    @pytest.fixture
    def docs(self, driver: StoreDriver, embedder: Embedder) -> GuardedIndex:
        """The index, created and holding :data:`DOCS`."""
        index = GuardedIndex.open(driver, embedder)
        index.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
        return index

    @pytest.fixture
    def others(self, embedder: Embedder) -> dict[str, Embedder]:
        return {f: Embedder(c) for f, c in variants(embedder.contract).items()}

    # -- helpers -----------------------------------------------------------------------

    @staticmethod
    def records(embedder: Embedder, texts: Mapping[str, str]) -> list[Record]:
        """Records as ctxemb would write them (the contract's vectors), for a raw client."""
        vectors = storable(
            embedder.embed_documents(list(texts.values())), embedder.contract.precision
        )
        return [Record(i, v, t, None) for (i, t), v in zip(texts.items(), vectors, strict=True)]

    @staticmethod
    def foreign(embedder: Embedder, record_id: str, text: str) -> Record:
        """A record whose vector is not the contract's vector of its text."""
        width = embedder.contract.output_dim
        vector = np.random.default_rng(len(text)).normal(size=width).astype(np.float32)
        return Record(record_id, vector, text, None)

    # -- creating ----------------------------------------------------------------------

    def test_a_new_index_carries_its_stamp_from_the_step_that_makes_it(self, driver, embedder):
        index = GuardedIndex.open(driver, embedder)
        assert index.created
        read = driver.read_stamp()
        assert read is not None
        assert same_contract(IndexStamp.from_metadata(read.metadata), embedder.contract, exact=True)
        again = GuardedIndex.open(driver, embedder)
        assert not again.created and same_contract(again.stamp, index.stamp, exact=True)
        # A second create of the same name makes nothing and says so.
        assert driver.create(IndexStamp.from_embedder(embedder)) is False
        assert self.snapshot(driver) == self.snapshot(index.driver)

    def test_concurrent_creators_make_one_index(self, new_driver, embedder):
        handles = [new_driver() for _ in range(6)]
        start = threading.Barrier(len(handles))
        opened: list[GuardedIndex] = []
        failed: list[BaseException] = []

        def run(handle: StoreDriver) -> None:
            start.wait()
            try:
                opened.append(GuardedIndex.open(handle, embedder))
            except BaseException as exc:  # reported below, with the others
                failed.append(exc)

        threads = [threading.Thread(target=run, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failed == []
        assert sum(i.created for i in opened) == 1
        heads = {i.driver.head() for i in opened}
        assert len({h.identity for h in heads if h is not None}) == 1

    def test_concurrent_indexers_of_one_corpus_add_each_record_once(self, docs, new_driver):
        corpus = {f"c{k}": f"Record number {k} is about topic {k % 7}." for k in range(40)}
        handles = [GuardedIndex.open(new_driver(), docs.embedder) for _ in range(4)]
        start = threading.Barrier(len(handles))
        added: list[int] = []
        failed: list[BaseException] = []

        def run(index: GuardedIndex) -> None:
            start.wait()
            try:
                added.append(index.add_missing(list(corpus), list(corpus.values())))
            except BaseException as exc:  # reported below, with the others
                failed.append(exc)

        threads = [threading.Thread(target=run, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failed == [] and sum(added) == len(corpus)
        assert sorted(docs.ids()) == sorted([*DOCS, *corpus])

    def test_open_without_create_refuses_a_missing_index(self, driver, embedder):
        # In the store's own words (the driver's missing_error), naming the index.
        with pytest.raises(InvalidInputError, match=re.escape(repr(driver.name))):
            GuardedIndex.open(driver, embedder, create=False)
        assert driver.head() is None

    # -- each contract field, on open, write and query ----------------------------------

    @pytest.mark.parametrize("field", FIELDS)
    def test_another_contract_is_refused_on_open(self, docs, new_driver, others, field):
        before = self.snapshot(docs.driver)
        for create in (True, False):
            with pytest.raises(ContractMismatchError) as err:
                GuardedIndex.open(new_driver(), others[field], create=create)
            assert field in err.value.fields
        assert self.snapshot(docs.driver) == before

    @pytest.mark.parametrize("field", FIELDS)
    def test_a_write_after_the_stamp_was_replaced_is_refused(self, docs, raw, others, field):
        docs.query([QUERY], 1)  # verified and in use
        raw.set_metadata(foreign_stamp(others[field].contract).to_metadata())
        before = self.snapshot(docs.driver)
        for call in (
            lambda: docs.add(["fresh"], ["A fresh text."]),
            lambda: docs.upsert(["tea"], ["Tea, replaced."]),
            lambda: docs.add_missing(["fresh"], ["A fresh text."]),
            lambda: docs.sync(["tea"], ["Tea, replaced."]),
            lambda: docs.delete(["tea"]),
            lambda: docs.query([QUERY], 1),
        ):
            with pytest.raises(ContractMismatchError) as err:
                call()
            assert field in err.value.fields
        assert self.snapshot(docs.driver) == before

    @pytest.mark.parametrize("field", FIELDS)
    def test_vectors_of_another_contract_are_refused_on_write(self, docs, others, field):
        before = self.snapshot(docs.driver)
        other = others[field].contract
        vectors = np.ones((1, other.output_dim), dtype=np.float32)
        with pytest.raises(ContractMismatchError):
            docs.add_embedded(["fresh"], vectors, ["A fresh text."], fingerprint=other.fingerprint)
        assert self.snapshot(docs.driver) == before

    @pytest.mark.parametrize("field", FIELDS)
    def test_another_contract_is_refused_on_query(self, docs, others, field):
        with pytest.raises(ContractMismatchError) as err:
            docs.query([QUERY], 3, embedder=others[field])
        assert field in err.value.fields
        with pytest.raises(ContractMismatchError):
            docs.query_vector(
                np.ones(docs.contract.output_dim),
                3,
                fingerprint=others[field].contract.fingerprint,
            )
        assert docs.query([QUERY], 1)[0][0].id == "tea"  # its own embedder still answers

    def test_the_same_weights_under_another_name_are_the_same_contract(self, docs, embedder):
        renamed = Embedder(embedder.contract.with_(model="copied/" + embedder.contract.model))
        assert GuardedIndex.open(docs.driver, renamed).count() == len(DOCS)
        assert docs.query([QUERY], 1, embedder=renamed)[0][0].id == "tea"

    # -- a stamp missing or tampered with -----------------------------------------------

    def test_an_unstamped_index_is_refused_and_adopted_only_when_its_vectors_prove_it(
        self, driver, raw, embedder
    ):
        raw.create()
        raw.write(self.records(embedder, DOCS))
        before = self.snapshot(driver)
        with pytest.raises(MissingStampError):
            GuardedIndex.open(driver, embedder)
        assert self.snapshot(driver) == before
        adopted = GuardedIndex.open(driver, embedder, adopt=True)
        assert adopted.query([QUERY], 1)[0][0].id == "tea"
        assert same_contract(
            GuardedIndex.open(driver, embedder).stamp, embedder.contract, exact=True
        )

    def test_an_unstamped_index_of_other_vectors_is_not_adopted(self, driver, raw, embedder):
        raw.create()
        raw.write([self.foreign(embedder, i, t) for i, t in DOCS.items()])
        before = self.snapshot(driver)
        with pytest.raises(MissingStampError):
            GuardedIndex.open(driver, embedder, adopt=True)
        assert self.snapshot(driver) == before

    @pytest.mark.parametrize(
        "tamper", ["removed", "fingerprint", "contract", "canary", "probes", "schema"]
    )
    def test_a_tampered_stamp_is_refused_on_open_and_on_the_next_call(
        self, docs, raw, embedder, others, tamper
    ):
        docs.query([QUERY], 1)
        meta = dict(raw_metadata(docs.driver))
        if tamper == "removed":
            meta = {k: v for k, v in meta.items() if not k.startswith("ctxemb:")}
        elif tamper == "fingerprint":
            meta["ctxemb:fingerprint"] = "0" * 64
        elif tamper == "contract":
            meta["ctxemb:contract"] = others["pooling"].contract.to_json()  # not its fingerprint's
        elif tamper == "canary":
            meta["ctxemb:canary"] = meta["ctxemb:canary"][:-8]
        elif tamper == "probes":
            meta["ctxemb:probes"] = "[]"
        else:
            meta["ctxemb:schema"] = 99
        raw.set_metadata(meta)
        expected = MissingStampError if tamper == "removed" else DamagedStampError
        with pytest.raises(expected) as refused:
            GuardedIndex.open(docs.driver, embedder)
        assert repr(docs.driver.name) in str(refused.value)  # which index, and the way back:
        assert "adopt=True" in str(refused.value)
        with pytest.raises(expected):
            docs.query([QUERY], 1)
        with pytest.raises(expected):
            docs.add(["fresh"], ["A fresh text."])
        assert not verify_driver(docs.driver, embedder).ok
        # Adopting replaces a damaged stamp as it stamps a missing one: once a sample of the
        # records re-embeds to their stored vectors.
        adopted = GuardedIndex.open(docs.driver, embedder, adopt=True)
        assert adopted.query([QUERY], 1)[0][0].id == "tea"
        assert GuardedIndex.open(docs.driver, embedder).count() == len(DOCS)

    # -- records written around the guard -----------------------------------------------

    @pytest.mark.parametrize("kind", ["foreign vector", "no text", "no vector", "another width"])
    def test_a_raw_write_is_caught_on_the_next_open(self, docs, raw, embedder, kind):
        GuardedIndex.open(docs.driver, embedder)  # passes, and is remembered
        quiet = GuardedIndex.open(docs.driver, embedder)
        assert quiet.open_check is not None and quiet.open_check.checked == 0
        if kind == "foreign vector":
            record = self.foreign(embedder, "raw", "A raw text.")
        elif kind == "no text":
            record = Record("raw", self.records(embedder, {"raw": "A raw text."})[0].vector)
        elif kind == "no vector":
            record = Record("raw", None, "A raw text.")
        else:
            record = Record("raw", np.ones(embedder.contract.output_dim + 1, np.float32), "A raw.")
        if kind in self.unstorable:
            return self.refused_raw(docs, raw, record)
        raw.write([record])
        with pytest.raises(ForeignVectorsError) as err:
            GuardedIndex.open(docs.driver, embedder)
        assert "raw" in err.value.ids
        report = verify_driver(docs.driver, embedder, all=True)
        assert not report.ok and report.bad_ids == ("raw",)

    def test_an_index_made_again_under_its_name_is_another_index(self, docs, raw, embedder):
        GuardedIndex.open(docs.driver, embedder)  # passes, and is remembered
        stamp = dict(raw_metadata(docs.driver))
        raw.drop()
        raw.create(stamp)  # the stamp copied onto a new index of other vectors
        raw.write([self.foreign(embedder, i, t) for i, t in DOCS.items()])
        with pytest.raises(ForeignVectorsError):  # the old index's record is not this one's
            GuardedIndex.open(docs.driver, embedder)
        with pytest.raises(ForeignVectorsError):
            docs.query([QUERY], 1)  # nor does the open handle take it for the one it verified
        raw.drop()
        raw.create()
        raw.write(self.records(embedder, DOCS))
        with pytest.raises(MissingStampError):
            docs.query([QUERY], 1)

    def test_an_old_record_rewritten_in_place_is_checked_first(self, driver, raw, embedder):
        if not driver.capabilities.marks:
            pytest.skip("without a write mark a rewrite in place is found by sampling only")
        texts = {f"d{k}": f"Record number {k} is about topic {k % 7}." for k in range(60)}
        index = GuardedIndex.open(driver, embedder)
        index.add(list(texts), list(texts.values()))
        GuardedIndex.open(driver, embedder, sample=2)  # passes, and is remembered
        raw.write([self.foreign(embedder, "d3", texts["d3"])])
        with pytest.raises(ForeignVectorsError) as err:
            GuardedIndex.open(driver, embedder, sample=2)
        assert err.value.ids == ("d3",)

    def test_a_vectorless_record_is_refused_by_a_query_not_ranked(self, docs, raw):
        if "no vector" in self.unstorable:
            return self.refused_raw(docs, raw, Record("hollow", None, "A vectorless record."))
        raw.write([Record("hollow", None, "A record without a vector.")])
        try:
            hits = docs.query([QUERY], len(DOCS) + 1)
        except ForeignVectorsError:
            return  # met by the search (a scan): refused
        # A search through a vector index never meets it (pgvector's HNSW holds no NULL
        # vectors): it is not ranked either; the next open's check finds it.
        assert "hollow" not in [m.id for m in hits[0]] and len(hits[0]) == len(DOCS)

    # -- writes: all or nothing ------------------------------------------------------------

    @pytest.mark.parametrize("replace", [False, True])
    @pytest.mark.parametrize("error", [StoreUnavailableError, KeyboardInterrupt])
    def test_a_failing_write_leaves_nothing_half_written(self, docs, raw, replace, error):
        before = self.snapshot(docs.driver)
        ids = ["tea", "bike", "new1", "new2", "new3"] if replace else ["n1", "n2", "n3", "n4"]
        texts = [f"Replaced text number {k}." for k in range(len(ids))]
        write = docs.upsert if replace else docs.add
        with raw.failing_writes(2, error("the store failed mid-batch")), pytest.raises(error):
            write(ids, texts)
        assert self.snapshot(docs.driver) == before
        write(ids, texts)  # and the same write goes through once the store works
        assert docs.count() == len(DOCS) + (3 if replace else 4)

    def test_add_refuses_ids_already_stored_and_writes_nothing(self, docs):
        before = self.snapshot(docs.driver)
        with pytest.raises(ExistingIdsError) as err:
            docs.add(["fresh", "tea"], ["A fresh text.", "Tea again."])
        assert err.value.ids == ("tea",)
        assert self.snapshot(docs.driver) == before

    def test_bad_batches_are_refused_before_anything_is_written(self, docs):
        before = self.snapshot(docs.driver)
        for ids, texts in (("tea", ["x"]), (["a", "a"], ["x", "y"]), (["a"], [None]), ([], [])):
            with pytest.raises(InvalidInputError):
                docs.add(ids, texts)
        with pytest.raises(InvalidInputError):
            docs.delete()
        with pytest.raises(InvalidInputError):
            docs.delete(where={})
        assert self.snapshot(docs.driver) == before

    # -- sync --------------------------------------------------------------------------

    def test_sync_writes_what_is_new_or_changed_and_nothing_else(self, docs, embedder):
        corpus = {**DOCS, "bank": "The central bank cut interest rates.", "fresh": "A fresh text."}
        plan = docs.sync(list(corpus), list(corpus.values()), dry_run=True)
        assert plan == SyncReport(("fresh",), ("bank",), len(DOCS) - 1, dry_run=True)
        mark = docs.driver.head()
        done = docs.sync(list(corpus), list(corpus.values()))
        assert (done.added, done.updated, done.unchanged) == (("fresh",), ("bank",), len(DOCS) - 1)
        stored = {r.id: r for r in docs.driver.read(["bank"], INCLUDE)}
        want = self.records(embedder, {"bank": corpus["bank"]})[0].vector
        assert stored["bank"].vector is not None and want is not None
        np.testing.assert_allclose(stored["bank"].vector, want, atol=1e-6)
        again = docs.sync(list(corpus), list(corpus.values()))
        assert again.embedded == 0 and again.unchanged == len(corpus)
        if mark is not None and mark.mark is not None:
            head = docs.driver.head()
            assert head is not None and head.mark is not None
            written = docs.driver.changes(mark.mark)
            assert sorted(written) == ["bank", "fresh"]  # the no-op sync wrote nothing

    def test_sync_of_records_written_before_digests_decides_by_their_text(
        self, docs, raw, embedder
    ):
        raw.write(self.records(embedder, {"old": "An old text.", "older": "An older text."}))
        raw.write([Record("blank", self.records(embedder, {"b": "Blank."})[0].vector, None)])
        done = docs.sync(["old", "older", "blank"], ["An old text.", "Changed.", "Blank."])
        assert done.unchanged == 1 and sorted(done.updated) == ["blank", "older"]

    def test_delete_missing_deletes_only_what_the_corpus_lacks(self, docs):
        keep = [i for i in DOCS if i != "moon"]
        assert docs.delete_missing(keep, dry_run=True) == ["moon"]
        assert docs.count() == len(DOCS)
        assert docs.delete_missing(keep) == ["moon"]
        assert sorted(docs.ids()) == sorted(keep)
        with pytest.raises(InvalidInputError):
            docs.delete_missing("tea")  # a string is not a corpus of ids
        assert docs.count() == len(keep)

    def test_add_missing_adds_what_is_not_stored(self, docs):
        assert docs.add_missing(["tea", "fresh"], ["Changed tea.", "A fresh text."]) == 1
        assert docs.add_missing(["tea", "fresh"], ["Changed tea.", "A fresh text."]) == 0

    # -- reading, verifying, re-stamping ---------------------------------------------------

    def test_a_query_returns_the_nearest_first_with_a_filter(self, docs):
        hits = docs.query([QUERY, "bicycle chain oil"], 2)
        assert [h[0].id for h in hits] == ["tea", "bike"]
        assert hits[0][0].score >= hits[0][1].score
        if docs.driver.capabilities.filters:
            only = docs.query([QUERY], 5, where={"n": 3})[0]
            assert [m.id for m in only] == ["slugs"]
            assert docs.delete(where={"n": 4}) == ["bank"]
        else:
            with pytest.raises(InvalidInputError):
                docs.query([QUERY], 5, where={"n": 3})

    def test_records_are_read_back_as_written(self, docs, embedder):
        (tea,) = docs.get(["tea", "absent"], include=["text", "metadata", "vector"])
        assert tea.text == DOCS["tea"] and tea.metadata is not None and tea.metadata["n"] == 0
        want = self.records(embedder, {"tea": DOCS["tea"]})[0].vector
        assert tea.vector is not None and want is not None
        np.testing.assert_allclose(tea.vector, want, rtol=0, atol=self.vector_tolerance)
        assert [r.id for r in docs.page(0, 10)] == list(DOCS)  # the store's order: as written
        with pytest.raises(InvalidInputError):
            docs.get(["tea"], include=["embeddings"])

    def test_verify_reports_every_check(self, docs, embedder):
        report = docs.verify(all=True)
        assert report.ok and report.sample_size == len(DOCS) and report.mode == "all"
        assert verify_driver(docs.driver, embedder).ok

    def test_a_query_side_change_is_restamped_and_a_re_embed_is_refused(self, docs, others):
        before = self.snapshot(docs.driver)
        with pytest.raises(ContractMismatchError):
            restamp_index(docs.driver, others["pooling"])
        assert self.snapshot(docs.driver) == before
        report = restamp_index(docs.driver, others["query_prefix"])
        assert report.changed and report.fields == ("query_prefix",)
        reopened = GuardedIndex.open(docs.driver, others["query_prefix"])
        assert reopened.query([QUERY], 1)[0][0].id == "tea"
        with pytest.raises(ContractMismatchError):
            docs.query([QUERY], 1)  # the old contract's handle sees the new stamp

    # -- each primitive, called directly: what the guard relies on ------------------------

    def moved_stamp(self, docs: GuardedIndex, new_driver: Any, others: Any) -> Any:
        """Another client re-stamps the index (a query-side change, through its own driver's
        ``write_stamp``); returns the stamp version the index had before."""
        read = docs.driver.read_stamp()
        assert read is not None
        stamp, _ = restamp_stamp(IndexStamp.from_metadata(read.metadata), others["query_prefix"])
        assert new_driver().write_stamp(stamp, stamp_version=read.head.stamp_version) is True
        head = docs.driver.head()
        assert head is not None and head.stamp_version != read.head.stamp_version
        return read.head.stamp_version

    def test_a_write_or_delete_at_a_stale_stamp_version_is_refused(
        self, docs, new_driver, others, embedder
    ):
        stale = self.moved_stamp(docs, new_driver, others)
        before = self.snapshot(docs.driver)
        fresh = self.records(embedder, {"fresh": "A fresh text."})
        replaced = self.records(embedder, {"tea": "Tea, replaced."})
        for call in (
            lambda: docs.driver.write(fresh, replace=False, stamp_version=stale),
            lambda: docs.driver.write(replaced, replace=True, stamp_version=stale),
            lambda: docs.driver.delete(["tea", "bike"], stamp_version=stale),
        ):
            with pytest.raises(StampMovedError):
                call()
        if docs.driver.capabilities.filters:
            with pytest.raises(StampMovedError):
                docs.driver.delete(where={"n": 0}, stamp_version=stale)
        assert self.snapshot(docs.driver) == before

    def test_write_stamp_at_a_stale_version_writes_nothing_and_a_stamp_keeps_other_keys(
        self, docs, raw, new_driver, others
    ):
        # The index's own metadata key, beside the stamp (where the store keeps metadata).
        raw.set_metadata({**raw_metadata(docs.driver), "owner": "team-a"})
        old = IndexStamp.from_metadata(raw_metadata(docs.driver))
        stale = self.moved_stamp(docs, new_driver, others)
        kept = dict(raw_metadata(docs.driver))
        assert kept["owner"] == "team-a"  # another client's write_stamp kept it
        assert kept["ctxemb:contract"] == others["query_prefix"].contract.to_json()
        before = self.snapshot(docs.driver)
        assert docs.driver.write_stamp(old, stamp_version=stale) is False
        assert self.snapshot(docs.driver) == before and dict(raw_metadata(docs.driver)) == kept

    def test_a_delete_of_several_ids_returns_exactly_those_it_deleted(self, docs):
        head = docs.driver.head()
        assert head is not None
        gone = docs.driver.delete(["moon", "absent", "tea"], stamp_version=head.stamp_version)
        assert sorted(gone) == ["moon", "tea"]
        assert sorted(docs.driver.ids()) == ["bank", "bike", "slugs"]
        assert docs.driver.delete(["absent"]) == []
        assert docs.delete(["bike", "absent"]) == ["bike"]

    def test_read_returns_records_in_the_order_given(self, docs):
        order = ["moon", "absent", "tea", "bank", "slugs", "bike"]
        want = [i for i in order if i in DOCS]
        for include in (INCLUDE, frozenset(), frozenset({"metadata"})):
            assert [r.id for r in docs.driver.read(order, include)] == want
        assert [r.id for r in docs.get(order)] == want

    def test_a_search_returns_at_most_k_hits_at_their_distance_in_its_space(self, docs):
        head = docs.driver.head()
        assert head is not None
        query = docs.query_vectors([QUERY])[0]
        hits = docs.driver.search(query, 2)
        assert [h.id for h in hits][:1] == ["tea"] and len(hits) == 2
        assert len(docs.driver.search(query, len(DOCS) + 3)) == len(DOCS)
        (tea,) = docs.driver.read(["tea"], frozenset({"vector"}))
        assert tea.vector is not None
        q, v = np.asarray(query, np.float64), np.asarray(tea.vector, np.float64)
        want = {
            "cosine": 1.0 - float(q @ v) / float(np.linalg.norm(q) * np.linalg.norm(v)),
            "ip": 1.0 - float(q @ v),
            "l2": float(((q - v) ** 2).sum()),
        }[head.space]
        assert hits[0].distance is not None and abs(hits[0].distance - want) < 1e-4
        assert len(docs.query([QUERY], 2)[0]) == 2

    def test_ids_and_page_honour_an_offset_past_the_first_page(self, docs):
        every = docs.driver.ids()
        assert sorted(every) == sorted(DOCS)
        assert docs.driver.ids(1, 2) == every[1:3]
        assert docs.driver.ids(3) == every[3:]
        assert docs.driver.ids(len(every), 2) == []
        assert [r.id for r in docs.driver.page(1, 2, frozenset())] == every[1:3]
        assert [r.id for r in docs.driver.page(4, 10, INCLUDE)] == every[4:]
        assert docs.driver.page(len(every), 2, INCLUDE) == []

    def test_a_seeking_driver_pages_from_a_place_in_its_order(self, docs):
        driver = docs.driver
        if not driver.capabilities.seeks:
            pytest.skip("the driver does not seek: an open counts and reads at an offset")
        every = driver.ids()
        assert [r.id for r in driver.page_near(0.0, 2, frozenset())] == every[:2]
        starts = set()
        for fraction in (0.0, 0.2, 0.4, 0.6, 0.8, 0.99):
            run = driver.page_near(fraction, 3, INCLUDE)
            got = [r.id for r in run]
            assert len(got) <= 3 and all(r.vector is not None and r.text for r in run)
            if got:  # a run of the store's order, wherever it starts
                starts.add(got[0])
                assert got == every[every.index(got[0]) :][: len(got)]
        assert len(starts) > 1  # not the same place whatever the fraction
        assert len(driver.page_near(0.0, len(every) + 5, INCLUDE)) == len(every)

    def test_a_sealing_driver_names_what_it_did_not_write_until_sealed(self, docs, raw, embedder):
        driver = docs.driver
        if not driver.capabilities.seals:
            pytest.skip("the driver does not seal its records")
        ids, unproven = driver.listed()
        assert ids == driver.ids() and unproven == []
        last = ids[-1]  # written around the driver in its place: the seal, not the order, says
        raw.write(self.records(embedder, {last: DOCS[last]}))
        assert driver.listed() == (ids, [last])
        assert driver.seal([last, "absent"]) == [last] and driver.seal([last]) == []
        assert driver.listed() == (ids, [])

    def test_refusals_after_open_are_worded_in_the_driver_terms(self, docs, raw, others):
        driver = docs.driver
        terms = getattr(driver, "terms", None)
        if not isinstance(terms, StoreTerms) or terms.module == DEFAULT_TERMS.module:
            terms = StoreTerms.of("conformance", "--conformance-store")
            driver.terms = terms  # a store's own words, on a driver that has the default's
        refusals: list[Callable[[], Any]] = [
            lambda: docs.query([QUERY], 1, embedder=others["pooling"]),
            lambda: restamp_index(driver, others["pooling"]),
        ]
        for refusal in refusals:
            with pytest.raises(ContractMismatchError) as err:
                refusal()
            assert terms.module in str(err.value), str(err.value)
            assert DEFAULT_TERMS.module not in str(err.value), str(err.value)
        raw.set_metadata(foreign_stamp(others["query_prefix"].contract).to_metadata())
        for call in (lambda: docs.add(["fresh"], ["A fresh text."]), lambda: docs.count()):
            with pytest.raises(ContractMismatchError) as err:
                call()
            assert terms.module in str(err.value), str(err.value)
            assert DEFAULT_TERMS.module not in str(err.value), str(err.value)

    # -- migrating between drivers ---------------------------------------------------------

    def test_a_copy_into_another_driver_is_bit_for_bit_and_resumes(self, docs):
        target = MemoryStore().driver("copy")
        copy = migrate_index(docs, target)
        assert self.snapshot(target) == self.snapshot(docs.driver)  # stamp and records, bit for bit
        assert copy.query([QUERY], 1)[0][0].id == "tea"
        copy.delete(["bike", "moon"])
        migrate_index(docs, target)  # a copy stopped half-way continues where it stopped
        assert self.snapshot(target) == self.snapshot(docs.driver)

    def test_a_copy_from_another_driver_is_bit_for_bit(self, driver, embedder):
        source = GuardedIndex.open(MemoryStore().driver("source"), embedder)
        source.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
        migrate_index(source, driver)
        assert self.snapshot(driver) == self.snapshot(source.driver)

    def test_a_copy_stopped_half_way_is_refused_until_a_migration_takes_it_up(
        self, driver, embedder
    ):
        store = MemoryStore()
        source = GuardedIndex.open(store.driver("source"), embedder)
        source.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
        lost = GuardedIndex.open(_LostAfterOnePage.of(store, "source"), embedder, sample=0)
        with pytest.raises(StoreUnavailableError):
            migrate_index(lost, driver, batch=2)  # two records in, then the source is gone
        for opening in (
            lambda: GuardedIndex.open(driver, embedder),
            lambda: GuardedIndex.open(driver, embedder, create=False, sample=0),
            lambda: restamp_index(driver, embedder),
        ):
            with pytest.raises(UnfinishedCopyError):  # never served as the whole
                opening()
        migrate_index(source, driver, batch=2)  # the same source's migration finishes it
        assert self.snapshot(driver) == self.snapshot(source.driver)  # its mark gone too
        assert GuardedIndex.open(driver, embedder).count() == len(DOCS)

    def test_a_copy_under_another_contract_re_embeds(self, docs, others):
        target = MemoryStore().driver("copy")
        copy = migrate_index(docs, target, others["document_prefix"])
        assert same_contract(copy.stamp, others["document_prefix"].contract, exact=True)
        assert sorted(copy.ids()) == sorted(DOCS)
        with pytest.raises(ContractMismatchError):
            migrate_index(docs, target)  # the target is the other contract's now


class _LostAfterOnePage(MemoryDriver):
    """A source whose store goes away after its first page: a migration stopped half-way."""

    pages = 0

    @classmethod
    def of(cls, store: MemoryStore, name: str) -> _LostAfterOnePage:
        made = store.driver(name)
        return cls(store, name, made.capabilities)

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        self.pages += 1
        if self.pages > 1:
            raise StoreUnavailableError("the source's store went away")
        return super().page(offset, limit, include)


def raw_metadata(driver: StoreDriver) -> Mapping[str, Any]:
    read = driver.read_stamp()
    assert read is not None and read.metadata is not None
    return read.metadata
