"""The parts a driver is built from (``ctxemb_core.index.driver_kit``, ``index.embedded``), on
their own: no store of any kind behind them."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ctxemb_core.errors import InvalidInputError, StoreUnavailableError
from ctxemb_core.index.armed import armed, sent_in_parts
from ctxemb_core.index.driver import Record
from ctxemb_core.index.driver_kit import (
    check_values,
    chunks,
    columns_of,
    records_of,
    same,
    unstorable,
    version_digest,
)
from ctxemb_core.index.embedded import (
    FolderClients,
    SqliteMarks,
    folders_near,
    held_elsewhere,
    opening_folder,
    require_store,
    store_folder,
)
from ctxemb_core.index.payloads import PayloadLayout


def test_values_a_wire_cannot_hold_are_named_before_anything_is_written():
    assert [unstorable(v) for v in (None, float("nan"), 2**63, True, 1.5, "x", -(2**63))] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    check_values(["a"], [{"k": [1, 2]}], "a server")
    with pytest.raises(
        InvalidInputError, match=r"metadatas\[1\] \(id 'b'\): 'k' = inf .* a server"
    ):
        check_values(["a", "b"], [None, {"k": [1.0, float("inf")]}], "a server")


def test_records_and_columns_round_trip_and_a_vectorless_record_is_refused():
    records = [Record("a", np.ones(2, np.float32), "t", {"k": 1}), Record("b", np.zeros(2), None)]
    ids, vectors, texts, metas = columns_of(records, "Store")
    again = records_of(ids, vectors, texts, metas)
    assert [(r.id, r.text, r.metadata) for r in again] == [("a", "t", {"k": 1}), ("b", None, None)]
    assert all(r.vector is not None and r.vector.dtype == np.float32 for r in again)
    assert records_of(["a"], None, None, None) == [Record("a")]
    with pytest.raises(InvalidInputError, match="Store stores no record without a vector"):
        columns_of([Record("c")], "Store")


def test_chunks_and_digests():
    assert [s.start for s in chunks(5, 2)] == [0, 2, 4]
    assert list(chunks(0, 3)) == []
    assert version_digest({"a": 1, "b": 2}) == version_digest({"b": 2, "a": 1})


class _Marks(SqliteMarks):
    SEGMENT = "SELECT id FROM segments WHERE owner = ?"
    MARK = "SELECT high FROM highs WHERE segment = ?"
    CHANGES = "SELECT rid FROM rows WHERE segment = ? AND seq > ? ORDER BY seq"
    TABLES = frozenset({"segments", "highs", "rows"})


def test_sqlite_marks_read_any_store_that_numbers_its_writes(tmp_path):
    path = tmp_path / "store.sqlite3"
    assert _Marks.at(path) is None  # no file
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE segments(id TEXT, owner TEXT); CREATE TABLE highs(segment TEXT, high);"
        "CREATE TABLE rows(segment TEXT, rid TEXT, seq INTEGER);"
        "INSERT INTO segments VALUES ('s1', 'idx');"
        "INSERT INTO highs VALUES ('s1', X'0000000000000003');"  # 8 big-endian bytes
        "INSERT INTO rows VALUES ('s1', 'a', 1), ('s1', 'b', 3), ('s1', 'c', 2);"
    )
    db.commit()
    marks = _Marks.at(path)
    assert marks is not None
    assert marks.mark("idx") == 3 and marks.mark("other") is None
    assert marks.changes("idx", 1) == ["c", "b"]
    assert marks.changes("idx", 3) == []  # the mark has not moved: no scan
    marks.close()
    db.execute("DROP TABLE rows")
    db.commit()
    assert _Marks.at(path) is None  # another schema: no mark claimed


def test_a_folder_is_made_safely_and_a_missing_store_names_a_near_one(tmp_path):
    target = tmp_path / "new" / "store"
    with pytest.raises(RuntimeError), opening_folder(target):
        assert target.is_dir()
        raise RuntimeError("the store failed to open")
    assert not (tmp_path / "new").exists()  # what the call made is gone
    with opening_folder(target):
        pass
    (target / "marker").touch()

    def is_store(p):
        return (p / "marker").is_file()

    assert folders_near(tmp_path / "stor", is_store) == []
    assert folders_near(target.parent / "stor", is_store) == [target]
    with pytest.raises(InvalidInputError, match=r"no Kind store .* did you mean .*\(tables: 'x'\)"):
        require_store(target.parent / "stor", is_store, lambda p: ["x"], "Kind", "tables")
    require_store(target, is_store, lambda p: [], "Kind")


def test_same_tells_true_from_one_at_any_depth():
    assert same({"a": [1, {"b": (2, "x")}]}, {"a": [1, {"b": (2, "x")}]})
    assert not same({"a": 1}, {"a": True}) and not same((1, [2]), (1, [2.0]))
    assert not same({"a": 1}, {"a": 1, "b": 2}) and not same([1], (1,))


def test_parts_sent_before_an_armed_failure_reach_the_store():
    written: list[list[int]] = []
    with armed(("s", "i"), after=5), pytest.raises(StoreUnavailableError):
        for part in sent_in_parts(("s", "i"), range(9), 2):
            written.append(part)
    assert written == [[0, 1], [2, 3], [4]]
    assert list(sent_in_parts(("s", "i"), range(3), 2)) == [[0, 1], [2]]  # fired once


def test_one_client_per_folder_and_a_held_lock_file(tmp_path):
    clients: FolderClients[object] = FolderClients()
    one = clients.joined(tmp_path, object, lambda c: False)
    assert clients.joined(tmp_path, object, lambda c: False) is one
    assert clients.joined(tmp_path, object, lambda c: True) is not one  # closed: opened again
    assert not held_elsewhere(tmp_path / ".lock")  # no such file
    (tmp_path / ".lock").touch()
    assert not held_elsewhere(tmp_path / ".lock")
    (tmp_path / "file").touch()
    with pytest.raises(StoreUnavailableError, match="is a file"):
        store_folder(tmp_path / "file", "x", "S", lambda p: True, lambda p: [], create=True)
    with pytest.raises(InvalidInputError, match="no S store"):
        store_folder(tmp_path / "none", "x", "S", lambda p: False, lambda p: [], create=False)


def test_a_payload_layout_round_trips_a_record():
    record = Record("d1", None, "Green tea.", {"n": 1})
    for layout in (PayloadLayout(), PayloadLayout(text="document", metadata=None)):
        back = layout.record(
            layout.payload(record), "key", [1.0, 2.0], frozenset({"text", "metadata"})
        )
        assert (back.id, back.text, back.metadata) == ("d1", "Green tea.", {"n": 1})
        assert back.vector is not None and back.vector.dtype == np.float32
    assert PayloadLayout(id=None).record({}, 7, None, frozenset()).id == "7"
