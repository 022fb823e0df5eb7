"""What the embedding cache trusts on disk: every byte a cached vector's meaning depends on is
checksummed, and a file that is not provably ctxemb's is never modified nor deleted.

Damage is done to the real SQLite file: bytes flipped in place, or rows rewritten through
sqlite3 as another program (or a failing disk) would leave them.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ctxemb_core.cache import CACHE_SCHEMA, CacheWarning, EmbeddingCache

FP = "f" * 64
DIM = 384
TEXTS = [f"text {i}" for i in range(20)]


def vectors_for(texts: list[str], dim: int = DIM) -> np.ndarray:
    rows = [
        np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
        .standard_normal(dim)
        .astype(np.float32)
        for t in texts
    ]
    return np.stack(rows)


def filled(path: Path) -> Path:
    with EmbeddingCache(path) as cache:
        cache.put_many(FP, "document", TEXTS, vectors_for(TEXTS))
    assert not Path(f"{path}-wal").exists()  # checkpointed: every row is in the main file
    return path


def update(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, params)
    conn.close()


def flip_bits(path: Path, find: bytes, replace: bytes) -> None:
    data = path.read_bytes()
    assert data.count(find) == 1, f"{find!r} occurs {data.count(find)} times"
    assert len(find) == len(replace)
    path.write_bytes(data.replace(find, replace))


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file in the folder, by name: proves nothing was written, made or deleted."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def assert_all_misses_with_a_warning(path: Path, match: str) -> None:
    with EmbeddingCache(path) as cache:
        with pytest.warns(CacheWarning, match=match):
            lookup = cache.get_many(FP, "document", TEXTS)
        assert not lookup.found.any()
        assert lookup.vectors.size == 0


# -- the namespace row: dtype and width ---------------------------------------------------------


def test_one_flipped_bit_in_the_stored_dtype_is_a_miss_not_byte_swapped_vectors(tmp_path: Path):
    path = filled(tmp_path / "cache.sqlite3")
    flip_bits(path, b"<f4", b">f4")  # '<' 0x3C -> '>' 0x3E: one bit, on disk

    assert_all_misses_with_a_warning(path, "failed its checksum")


@pytest.mark.parametrize(
    ("dtype", "dim"),
    [
        ("<f8", DIM // 2),  # the blobs fit exactly: 192 float64 = 384 float32 bytes
        ("<f2", DIM * 2),  # fit too
        (">f4", DIM),  # byte-swapped
        ("<f4", DIM // 2),  # half the width
        ("<i4", DIM),  # not a float at all
        ("xyz", DIM),  # not a dtype
        ("|O", DIM),  # object pointers
        (b"<f4", DIM),  # the right bytes, as a blob: SQLite's dynamic typing
        # INTEGER affinity turns '384' and 384.0 back into 384; what it cannot convert stays.
        ("<f4", f"{DIM}x"),  # text
        ("<f4", DIM + 0.5),  # a real
        ("<f4", b"\x01\x80"),  # a blob
        ("<f4", 0),
        ("<f4", -DIM),
    ],
)
def test_any_other_dtype_or_width_in_the_namespace_row_is_a_miss(tmp_path: Path, dtype, dim):
    path = filled(tmp_path / "cache.sqlite3")
    update(path, "UPDATE namespaces SET dtype = ?, dim = ?", dtype, dim)

    assert_all_misses_with_a_warning(path, "failed its checksum")


def test_a_stored_dtype_that_is_not_even_utf8_is_a_miss(tmp_path: Path):
    path = filled(tmp_path / "cache.sqlite3")
    update(path, "UPDATE namespaces SET dtype = CAST(x'3cff34' AS TEXT)")  # '<\xff4'

    assert_all_misses_with_a_warning(path, "failed its checksum")


def test_each_row_checksum_covers_dtype_and_width_on_its_own(tmp_path: Path):
    # A namespace row rewritten consistently, its own checksum included (a bug, or an old
    # writer): every row's checksum still names the layout it was stored under.
    from ctxemb_core.cache import _digest, _namespace_hash

    path = filled(tmp_path / "cache.sqlite3")
    forged = _digest(_namespace_hash(FP, "document", "<f8", DIM // 2))
    update(path, "UPDATE namespaces SET dtype = '<f8', dim = ?, checksum = ?", DIM // 2, forged)

    assert_all_misses_with_a_warning(path, f"{len(TEXTS)} cached vectors .* failed their checksum")


def test_a_damaged_namespace_row_is_rewritten_by_the_next_store(tmp_path: Path):
    path = filled(tmp_path / "cache.sqlite3")
    update(path, "UPDATE namespaces SET checksum = checksum + 1")

    with EmbeddingCache(path) as cache:
        with pytest.warns(CacheWarning, match="was rewritten"):
            cache.put_many(FP, "document", TEXTS[:5], vectors_for(TEXTS[:5]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # repaired: the rows verify again
            lookup = cache.get_many(FP, "document", TEXTS)
    assert lookup.found.all()  # the other 15 were stored under the same layout: still good
    assert lookup.vectors.tobytes() == vectors_for(TEXTS).tobytes()


def test_a_genuine_width_change_is_still_an_argument_error(tmp_path: Path):
    path = filled(tmp_path / "cache.sqlite3")
    with (
        EmbeddingCache(path) as cache,
        pytest.raises(ValueError, match="already cached"),
    ):
        cache.put_many(FP, "document", ["x"], vectors_for(["x"], dim=DIM // 2))


# -- the vector rows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "change", "seen"),
    [
        ("checksum", "(checksum | 1) - (checksum & 1)", True),  # bit 0 flipped
        ("vector", "CAST(substr(vector, 1, 1532) || x'00000000' AS BLOB)", True),  # last zeroed
        ("vector", "substr(vector, 1, 1532) || x'00000000'", True),  # || makes TEXT, not UTF-8
        ("vector", "substr(vector, 1, 1532)", True),  # one float short
        ("vector", "CAST(vector AS TEXT)", True),  # another type
        ("key", "zeroblob(32)", False),  # no longer any text's key: simply not found
        ("ns", "ns + 1", False),  # moved into a namespace that does not exist
    ],
)
def test_a_damaged_vector_row_is_a_miss(tmp_path: Path, column: str, change: str, seen: bool):
    path = filled(tmp_path / "cache.sqlite3")
    update(path, f"UPDATE vectors SET {column} = {change} WHERE rowid = 3")

    with EmbeddingCache(path) as cache:
        if seen:
            with pytest.warns(CacheWarning, match="1 cached vectors .* failed their checksum"):
                lookup = cache.get_many(FP, "document", TEXTS)
        else:
            lookup = cache.get_many(FP, "document", TEXTS)
    assert lookup.found.sum() == len(TEXTS) - 1
    hits = [t for t, f in zip(TEXTS, lookup.found, strict=True) if f]
    assert lookup.vectors.tobytes() == vectors_for(hits).tobytes()


def test_a_row_moved_into_another_namespace_is_a_miss_there(tmp_path: Path):
    path = filled(tmp_path / "cache.sqlite3")
    with EmbeddingCache(path) as cache:
        cache.put_many(FP, "query", ["other"], vectors_for(["other"]))
    update(path, "UPDATE vectors SET ns = (SELECT id FROM namespaces WHERE role = 'query')")

    with (
        EmbeddingCache(path) as cache,
        pytest.warns(CacheWarning, match="failed their checksum"),
    ):
        assert not cache.get_many(FP, "query", TEXTS).found.any()


# -- schema versions ---------------------------------------------------------------------------


def test_an_old_schema_file_of_ours_is_off_until_clear_rebuilds_it(tmp_path: Path):
    path = filled(tmp_path / "cache.sqlite3")
    update(path, "PRAGMA user_version = 1")  # the schema whose checksums missed dtype and width

    with EmbeddingCache(path) as cache:
        with pytest.warns(CacheWarning, match=f"schema 1; this ctxemb reads schema {CACHE_SCHEMA}"):
            assert not cache.get_many(FP, "document", TEXTS).found.any()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache.clear()  # provably ours (application_id): deleted and made anew
        cache.put_many(FP, "document", TEXTS, vectors_for(TEXTS))
        assert cache.get_many(FP, "document", TEXTS).found.all()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == CACHE_SCHEMA
    conn.close()


# -- files that are not ours -------------------------------------------------------------------


def _sqlite(path: Path, *pragmas: str) -> None:
    conn = sqlite3.connect(path)
    for pragma in pragmas:
        conn.execute(pragma)
    with conn:
        conn.execute("CREATE TABLE accounts (name TEXT)")
        conn.execute("INSERT INTO accounts VALUES ('kept')")
    conn.close()


def _damaged_header(path: Path, offset: int) -> None:
    filled(path)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


FOREIGN: dict[str, Callable[[Path], None]] = {
    # user_version 1 is the number of our own old schema: the version proves nothing.
    "database with user_version": lambda p: _sqlite(p, "PRAGMA user_version = 1"),
    "database with its own application_id": lambda p: _sqlite(p, "PRAGMA application_id = 7"),
    "database without tables, with a version": lambda p: (
        sqlite3.connect(p).execute("PRAGMA user_version = 3").connection.close()
    ),
    "text file": lambda p: p.write_text("name,balance\nkept,1\n" * 500),
    "our cache, magic bytes damaged": lambda p: _damaged_header(p, 3),
    "our cache, application_id damaged": lambda p: _damaged_header(p, 71),
}


def _state(path: Path) -> tuple[dict[str, str], str | None]:
    journal = None
    if path.read_bytes().startswith(b"SQLite format 3\x00"):
        journal = {1: "delete", 2: "wal"}.get(path.read_bytes()[18])
    return snapshot(path.parent), journal


def _exercise(path: Path) -> None:
    """Every call of the cache, each of which must warn and change nothing."""
    cache = EmbeddingCache(path)
    with pytest.warns(CacheWarning, match="nothing proves it is a ctxemb cache"):
        assert not cache.get_many(FP, "document", TEXTS).found.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per instance
        cache.put_many(FP, "document", TEXTS, vectors_for(TEXTS))
        assert cache.get_or_compute(FP, "document", ["a"], vectors_for).shape == (1, DIM)
        assert cache.stats().entries == 0
    for _ in range(2):  # refused every time it is asked, not once
        with pytest.warns(CacheWarning, match=r"clear\(\) left .* as it is"):
            cache.clear()
    cache.close()
    # A fresh instance, whose first call is clear().
    with pytest.warns(CacheWarning, match=r"clear\(\) left .* as it is"):
        EmbeddingCache(path).clear()


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_a_file_that_is_not_provably_ours_is_never_modified_nor_deleted(tmp_path: Path, kind):
    path = tmp_path / "cache.sqlite3"
    FOREIGN[kind](path)
    before = _state(path)

    _exercise(path)

    assert _state(path) == before  # same files, same bytes, same journal mode


def test_a_foreign_database_in_wal_mode_keeps_its_sidecars(tmp_path: Path):
    path = tmp_path / "theirs.sqlite3"
    owner = sqlite3.connect(path, isolation_level=None)
    owner.execute("PRAGMA journal_mode = WAL")
    owner.execute("PRAGMA wal_autocheckpoint = 0")  # its writes stay in the -wal file
    owner.execute("CREATE TABLE accounts (name TEXT)")
    owner.execute("INSERT INTO accounts VALUES ('only in the wal')")
    try:
        assert {p.name for p in tmp_path.iterdir()} == {
            "theirs.sqlite3",
            "theirs.sqlite3-wal",
            "theirs.sqlite3-shm",
        }
        before = _state(path)
        assert before[1] == "wal"

        _exercise(path)

        assert _state(path) == before
        assert owner.execute("SELECT name FROM accounts").fetchall() == [("only in the wal",)]
    finally:
        owner.close()


def test_a_directory_at_the_path_is_left_alone(tmp_path: Path):
    path = tmp_path / "cache.sqlite3"
    path.mkdir()
    (path / "inside").write_text("kept")

    _exercise(path)

    assert path.is_dir() and (path / "inside").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.sqlite3"]


def test_a_file_replaced_by_a_foreign_one_after_it_broke_is_not_deleted(tmp_path: Path):
    path = tmp_path / "cache.sqlite3"
    filled(path)
    update(path, "PRAGMA user_version = 1")
    cache = EmbeddingCache(path)
    with pytest.warns(CacheWarning, match="schema 1"):
        cache.get_many(FP, "document", TEXTS)  # ours, old schema: clear() would rebuild it

    os.remove(path)
    _sqlite(path)  # meanwhile another program put its database there
    before = _state(path)
    with pytest.warns(CacheWarning, match=r"clear\(\) left .* as it is"):
        cache.clear()
    assert _state(path) == before
    cache.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.touch(),  # a zero-byte file
        lambda p: sqlite3.connect(p).close(),  # what sqlite3.connect leaves: nothing
    ],
)
def test_an_empty_file_becomes_our_cache(tmp_path: Path, make: Callable[[Path], None]):
    path = tmp_path / "cache.sqlite3"
    make(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with EmbeddingCache(path) as cache:
            cache.put_many(FP, "document", TEXTS, vectors_for(TEXTS))
            assert cache.get_many(FP, "document", TEXTS).found.all()
    header = path.read_bytes()[:100]
    assert header[68:72] == b"ctxe"  # the application_id that proves it ours from now on


def test_our_new_file_carries_its_mark_before_anything_else_is_written(tmp_path: Path):
    # The header alone proves a file ours: created in one transaction with its tables, the
    # application_id is in the main file, never only in a write-ahead log.
    path = tmp_path / "cache.sqlite3"
    cache = EmbeddingCache(path)
    cache.get_many(FP, "document", ["a"])  # opens (and creates) the file; the cache stays open
    try:
        assert path.read_bytes()[68:72] == b"ctxe"
        assert path.read_bytes()[18] == 2  # then switched to WAL
    finally:
        cache.close()


@pytest.fixture(autouse=True)
def _no_stray_warnings() -> Iterator[None]:
    # Each test asserts the warnings it expects; any other CacheWarning is a failure.
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        yield
