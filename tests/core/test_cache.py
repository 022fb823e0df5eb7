"""The embedding cache: exact vectors, isolated namespaces, a bounded LRU, many writers, and a
file that may break without breaking the job that uses it."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from ctxemb_core.cache import CacheStats, CacheWarning, EmbeddingCache
from ctxemb_core.contract import Role
from ctxemb_core.errors import InvalidInputError

FP = "f" * 64
OTHER_FP = "0" * 64


def vectors_for(texts: list[str], dim: int = 16) -> np.ndarray:
    """Deterministic float32 vectors, one per text, the same in every process."""
    rows = []
    for text in texts:
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
        rows.append(np.random.default_rng(seed).standard_normal(dim).astype(np.float32))
    return np.stack(rows) if rows else np.empty((0, dim), dtype=np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def cache(tmp_path: Path):
    with EmbeddingCache(tmp_path / "cache.sqlite3") as c:
        yield c


# -- exactness and isolation -------------------------------------------------------------------


def test_round_trip_is_bit_exact(cache: EmbeddingCache):
    # NUL, a noncharacter and the last code point are valid Unicode (a lone surrogate is not).
    texts = ["a", "b", "c", "d", "é – unicode ✓", "\x00 \uffff \U0010ffff", ""]
    vectors = vectors_for(texts, dim=8)
    # Values a float round trip through text or float64 would disturb.
    vectors[0, :6] = [np.nan, -0.0, np.inf, -np.inf, np.finfo(np.float32).tiny / 8, 1e-45]
    vectors[1, 0] = np.frombuffer(b"\x01\x00\xc0\x7f", dtype=np.float32)[0]  # NaN with payload
    cache.put_many(FP, "document", texts, vectors)

    lookup = cache.get_many(FP, "document", texts)
    assert lookup.found.all()
    assert same_bits(lookup.vectors, vectors)
    assert lookup.vectors.flags.writeable

    with EmbeddingCache(cache.path) as reopened:  # from disk, not from this connection
        assert same_bits(reopened.get_many(FP, Role.DOCUMENT, texts).vectors, vectors)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.dtype(">f4")])
def test_other_float_dtypes_round_trip(cache: EmbeddingCache, dtype):
    vectors = vectors_for(["x", "y"], dim=5).astype(dtype)
    cache.put_many(FP, "query", ["x", "y"], vectors)
    got = cache.get_many(FP, "query", ["x", "y"]).vectors
    np.testing.assert_array_equal(got, vectors)
    assert got.dtype == np.dtype(dtype).newbyteorder("=")


def test_other_fingerprint_or_role_never_hits(cache: EmbeddingCache):
    texts = ["alpha", "beta"]
    cache.put_many(FP, "document", texts, vectors_for(texts))

    assert not cache.get_many(OTHER_FP, "document", texts).found.any()
    assert not cache.get_many(FP, "query", texts).found.any()
    assert not cache.get_many(FP[:-1], "document", texts).found.any()

    # Both namespaces may hold the same text with different vectors, side by side.
    query_vectors = vectors_for(["q:" + t for t in texts])
    cache.put_many(FP, "query", texts, query_vectors)
    assert same_bits(cache.get_many(FP, "query", texts).vectors, query_vectors)
    assert same_bits(cache.get_many(FP, "document", texts).vectors, vectors_for(texts))


def test_partial_hits_keep_input_order(cache: EmbeddingCache):
    texts = [f"text {i}" for i in range(10)]
    cache.put_many(FP, "document", texts[::2], vectors_for(texts[::2]))

    asked = ["text 9", "text 8", "nope", "text 0", "text 8", "text 1", "text 4"]
    lookup = cache.get_many(FP, "document", asked)

    assert lookup.found.tolist() == [False, True, False, True, True, False, True]
    hits = [t for t, f in zip(asked, lookup.found, strict=True) if f]
    assert same_bits(lookup.vectors, vectors_for(hits))


def test_nothing_stored_yet_is_all_misses(cache: EmbeddingCache):
    lookup = cache.get_many(FP, "document", ["a", "b"])
    assert lookup.found.tolist() == [False, False]
    assert lookup.vectors.shape == (0, 0)
    assert cache.get_many(FP, "document", []).found.shape == (0,)


def test_get_or_compute_embeds_only_the_distinct_misses(cache: EmbeddingCache):
    cache.put_many(FP, "document", ["b"], vectors_for(["b"]))
    asked: list[list[str]] = []

    def compute(texts: list[str]) -> np.ndarray:
        asked.append(texts)
        return vectors_for(texts)

    texts = ["a", "b", "c", "a", "b"]
    out = cache.get_or_compute(FP, "document", texts, compute)
    assert asked == [["a", "c"]]
    assert same_bits(out, vectors_for(texts))

    again = cache.get_or_compute(FP, "document", texts, compute)
    assert asked == [["a", "c"]]  # all hits now: not called again
    assert same_bits(again, out)


def test_stats_count_this_instance(cache: EmbeddingCache):
    texts = ["a", "b", "c"]
    cache.put_many(FP, "document", texts, vectors_for(texts, dim=4))
    cache.get_many(FP, "document", ["a", "x", "b"])
    stats = cache.stats()
    assert stats == CacheStats(entries=3, bytes=3 * (32 + 16), hits=2, misses=1, evicted=0)

    cache.put_many(FP, "document", ["a"], vectors_for(["a"], dim=4))  # a replacement adds nothing
    assert cache.stats().entries == 3
    cache.clear()
    assert (cache.stats().entries, cache.stats().bytes) == (0, 0)
    assert not cache.get_many(FP, "document", texts).found.any()


def test_default_path_is_in_the_ctxemb_cache_dir():
    assert EmbeddingCache().path == Path(os.environ["CTXEMB_CACHE_DIR"]) / "embeddings.sqlite3"


def test_a_pickled_cache_reopens_the_same_file(cache: EmbeddingCache):
    cache.put_many(FP, "document", ["a"], vectors_for(["a"]))
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.path == cache.path and copy.max_bytes == cache.max_bytes
    assert copy.get_many(FP, "document", ["a"]).found.all()
    copy.close()


# -- the size bound ----------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["same instance", "other instance"])
def test_eviction_keeps_the_bound_and_drops_the_least_recently_used(tmp_path: Path, reader):
    # dim 8 float32: 32 vector bytes + 32 key bytes per entry, 640 bytes per group of ten.
    a, b, c = ([f"{g}{i}" for i in range(10)] for g in "abc")
    path = tmp_path / "lru.sqlite3"
    with EmbeddingCache(path, max_bytes=1450) as cache:
        cache.put_many(FP, "document", a, vectors_for(a, dim=8))
        cache.put_many(FP, "document", b, vectors_for(b, dim=8))
        if reader == "same instance":
            assert cache.get_many(FP, "document", a).found.all()
        else:
            with EmbeddingCache(path) as other:  # its access times are written on close
                assert other.get_many(FP, "document", a).found.all()
        # a was read after b was written, so b is the least recently used: it goes.
        cache.put_many(FP, "document", c, vectors_for(c, dim=8))

        stats = cache.stats()
        assert stats.bytes <= 1450
        assert stats.evicted == 10
        assert cache.get_many(FP, "document", a).found.all()
        assert cache.get_many(FP, "document", c).found.all()
        assert not cache.get_many(FP, "document", b).found.any()


def test_a_put_larger_than_the_bound_still_keeps_it(tmp_path: Path):
    texts = [f"t{i}" for i in range(100)]
    with EmbeddingCache(tmp_path / "small.sqlite3", max_bytes=1000) as cache:
        cache.put_many(FP, "document", texts, vectors_for(texts, dim=8))
        stats = cache.stats()
        assert 0 < stats.bytes <= 1000
        assert stats.entries == cache.get_many(FP, "document", texts).found.sum()


# -- several writers ---------------------------------------------------------------------------

_WRITER = """
import json, sys, time, warnings
from pathlib import Path
import hashlib
import numpy as np
from ctxemb_core.cache import EmbeddingCache

{vectors_for}

path, go, start, stop, max_bytes = sys.argv[1:6]
texts = [f"text {{i}}" for i in range(int(start), int(stop))]
errors = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache = EmbeddingCache(path, max_bytes=int(max_bytes))
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    for i in range(0, len(texts), 40):
        batch = texts[i : i + 40]
        cache.put_many("{fp}", "document", batch, vectors_for(batch))
        probe = batch + texts[::7]
        lookup = cache.get_many("{fp}", "document", probe)
        hits = [t for t, f in zip(probe, lookup.found) if f]
        if lookup.vectors.tobytes() != vectors_for(hits).tobytes():
            errors.append(f"wrong vectors after batch {{i}}")
    cache.close()
print(json.dumps({{"errors": errors, "warnings": [str(w.message) for w in caught]}}))
"""


def test_two_processes_writing_overlapping_keys_leave_a_consistent_cache(tmp_path: Path):
    path = tmp_path / "shared.sqlite3"
    go = tmp_path / "go"
    max_bytes = 120_000  # about 750 of the 1,800 texts: both writers also evict
    script = _WRITER.format(vectors_for=inspect.getsource(vectors_for), fp=FP)
    ranges = [(0, 1200), (600, 1800)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(path), str(go), str(a), str(b), str(max_bytes)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a, b in ranges
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()  # both start writing at the same moment
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        assert report == {"errors": [], "warnings": []}

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        counted = conn.execute(
            "SELECT count(*), coalesce(sum(length(key) + length(vector)), 0) FROM vectors"
        ).fetchone()
        recorded = conn.execute("SELECT entries, bytes FROM state").fetchone()
    conn.close()
    assert counted == recorded  # the running counts agree with the rows

    texts = [f"text {i}" for i in range(1800)]
    with EmbeddingCache(path, max_bytes=max_bytes) as cache:
        lookup = cache.get_many(FP, "document", texts)
        stats = cache.stats()
    hits = [t for t, f in zip(texts, lookup.found, strict=True) if f]
    assert same_bits(lookup.vectors, vectors_for(hits))
    assert stats.entries == len(hits) > 0
    assert stats.bytes <= max_bytes


def test_threads_share_one_instance(cache: EmbeddingCache):
    failures: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(20):
                batch = [f"{(k + i) % 7}-{j}" for j in range(25)]
                cache.put_many(FP, "document", batch, vectors_for(batch))
                lookup = cache.get_many(FP, "document", batch)
                assert lookup.found.all() and same_bits(lookup.vectors, vectors_for(batch))
        except BaseException as exc:  # reported to the main thread below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# -- a broken file is only a slower start ------------------------------------------------------


def _filled(path: Path, texts: list[str]) -> None:
    with EmbeddingCache(path) as cache:
        cache.put_many(FP, "document", texts, vectors_for(texts))
    assert not Path(f"{path}-wal").exists()  # closed cleanly: everything is in the main file


def test_a_damaged_page_of_our_file_degrades_to_misses_and_clear_rebuilds(tmp_path: Path):
    path = tmp_path / "cache.sqlite3"
    texts = [f"t{i}" for i in range(50)]
    _filled(path, texts)
    data = bytearray(path.read_bytes())
    # Garbage after the 100-byte header: the schema page is destroyed, the header still proves
    # the file ours (a wholly garbage file is not provably ours: see test_cache_integrity.py).
    data[100:] = np.random.default_rng(0).bytes(len(data) - 100)
    path.write_bytes(bytes(data))

    cache = EmbeddingCache(path)
    with pytest.warns(CacheWarning, match="clear"):
        lookup = cache.get_many(FP, "document", texts)
    assert not lookup.found.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, not on every call
        cache.put_many(FP, "document", texts, vectors_for(texts))
        assert not cache.get_many(FP, "document", texts).found.any()
        assert cache.stats().entries == 0

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file proven ours is rebuilt without a word
        cache.clear()  # starts a new cache in its place
    cache.put_many(FP, "document", texts, vectors_for(texts))
    assert same_bits(cache.get_many(FP, "document", texts).vectors, vectors_for(texts))
    cache.close()


def test_a_damaged_vector_is_a_miss_not_a_wrong_vector(tmp_path: Path):
    path = tmp_path / "cache.sqlite3"
    texts = [f"t{i}" for i in range(50)]
    _filled(path, texts)
    data = bytearray(path.read_bytes())
    at = data.find(vectors_for(["t7"]).tobytes())
    assert at > 0
    data[at + 5] ^= 0x10  # one flipped bit inside the stored vector
    path.write_bytes(bytes(data))

    with EmbeddingCache(path) as cache:
        with pytest.warns(CacheWarning, match="checksum"):
            lookup = cache.get_many(FP, "document", texts)
        assert lookup.found.tolist() == [t != "t7" for t in texts]
        hits = [t for t in texts if t != "t7"]
        assert same_bits(lookup.vectors, vectors_for(hits))

        # Re-embedding the miss replaces the damaged entry.
        out = cache.get_or_compute(FP, "document", texts, vectors_for)
        assert same_bits(out, vectors_for(texts))
        assert cache.get_many(FP, "document", ["t7"]).found.all()


def test_an_unusable_location_degrades_to_misses(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = EmbeddingCache(blocker / "cache.sqlite3")
    with pytest.warns(CacheWarning):
        assert not cache.get_many(FP, "document", ["a"]).found.any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        cache.put_many(FP, "document", ["a"], vectors_for(["a"]))  # skipped, not raised


def test_another_applications_database_is_left_alone(tmp_path: Path):
    path = tmp_path / "theirs.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (name TEXT)")
        conn.execute("INSERT INTO accounts VALUES ('kept')")
    conn.close()

    cache = EmbeddingCache(path)
    with pytest.warns(CacheWarning, match="another application"):
        assert not cache.get_many(FP, "document", ["a"]).found.any()
    with pytest.warns(CacheWarning, match="left .* as it is"):
        cache.clear()
    cache.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM accounts").fetchall() == [("kept",)]
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 1
    conn.close()


# -- invalid arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("texts", "vectors", "message"),
    [
        ("one string", np.zeros((1, 16), np.float32), "list of strings"),
        (["a", 3], np.zeros((2, 16), np.float32), r"texts\[1\] is int"),
        (["a", None], np.zeros((2, 16), np.float32), r"texts\[1\] is NoneType"),
        (["a", "b"], np.zeros((3, 16), np.float32), "2 texts but 3 vectors"),
        (["a"], np.zeros(16, np.float32), "shape"),
        (["a"], np.zeros((1, 0), np.float32), "dim >= 1"),
        (["a"], np.zeros((1, 16), np.int8), "floats"),
        (["a"], [["x"] * 16], "floats"),
        (["a"], np.zeros((1, 8), np.float32), "width 8"),
        (["a"], np.zeros((1, 16), np.float64), "float64"),
    ],
)
def test_invalid_puts_raise(cache: EmbeddingCache, texts, vectors, message):
    cache.put_many(FP, "document", ["seed"], vectors_for(["seed"]))  # 16-wide float32
    with pytest.raises(InvalidInputError, match=message):
        cache.put_many(FP, "document", texts, vectors)
    assert cache.stats().entries == 1  # nothing half-written


@pytest.mark.parametrize(
    ("fingerprint", "role", "texts", "message"),
    [
        (FP, "document", "one string", "list of strings"),
        (FP, "document", ["a", b"bytes"], "bytes, not a string"),
        (FP, "document", None, "list of strings"),
        ("", "document", ["a"], "fingerprint"),
        (None, "document", ["a"], "fingerprint"),
        (FP, "passage", ["a"], "valid values are 'query', 'document'"),
    ],
)
def test_invalid_lookups_raise(cache: EmbeddingCache, fingerprint, role, texts, message):
    with pytest.raises(InvalidInputError, match=message):
        cache.get_many(fingerprint, role, texts)


def test_a_compute_of_the_wrong_shape_raises(cache: EmbeddingCache):
    with pytest.raises(InvalidInputError, match="2 texts but 1 vectors"):
        cache.get_or_compute(FP, "document", ["a", "b"], lambda t: vectors_for(t[:1]))


@pytest.mark.parametrize("max_bytes", [0, -1, 1.5, True, "1GB"])
def test_invalid_bound_raises(tmp_path: Path, max_bytes):
    with pytest.raises(InvalidInputError, match="max_bytes"):
        EmbeddingCache(tmp_path / "c.sqlite3", max_bytes=max_bytes)


def test_lookups_of_thousands_are_batched(cache: EmbeddingCache):
    # Not a timing assertion: more texts than one statement may bind must still all come back.
    texts = [f"doc {i}" for i in range(2500)]
    vectors = vectors_for(texts, dim=4)
    cache.put_many(FP, "document", texts, vectors)
    lookup = cache.get_many(FP, "document", texts)
    assert lookup.found.all() and same_bits(lookup.vectors, vectors)
