"""The guard's own costs through GuardedIndex, at 1k / 10k / 100k / 1M records: an open and a
no-op sync, with a store's write mark and without one (issue 44, item 8).

Issue 44 measured the guard reading every id on every open (0.35 s at 100k on Chroma) and the
verified-open record dropped above 200,000 records. A driver that keeps a write mark lets the
guard ask "what was written since the last verified open" instead. Measured on the reference
in-memory driver (so that only the guard's costs show: no store's loading, no network), with a
static model of 384 dimensions (numpy only: the embedding is not what is measured):

1. **Open** (seconds, median of ``--repeats``): a verified open of an unchanged index (stamp,
   canary, and the record of the last verified state), through the same index's driver with its
   write mark and through one without (the reference, measured in the same run: every id is
   listed and compared, as the Chroma adapter does). Beside each, how many ids and records the
   open read and re-embedded. Goal: with the mark, open does not grow with N (``ids_read`` 0,
   nothing re-embedded at any size); listing ids grows with N, and above 200,000 records
   (``MAX_RECORDED``) keeps no record, so every open re-embeds a sample again.
2. **Open after 100 changed texts** (one sync of the corpus with 100 texts changed, spread over
   it): the open re-embeds the changed records (a sample of them) and random others.
3. **No-op sync** (seconds): the whole corpus synced again in batches of 1,000 (as ``ctxemb
   index`` does): every batch's digests compared, nothing embedded or written. This one is
   O(N) by nature (each document is compared); the guard's share per batch is one head read.
4. **100-text change**: the same sync with 100 texts changed, spread over the corpus.

The same figures through a real store's driver: ``--store pgvector`` (a throwaway PostgreSQL,
whose write mark is the row sequence read under a check of the table's lock holders) and
``--store chroma`` (embedded: the write mark is the sequence number Chroma gives every write).

Run:  .venv/bin/python benchmarks/guarded_index.py   (~4 minutes and ~3 GB for the 1M index)
      .venv/bin/python benchmarks/guarded_index.py --store pgvector
      .venv/bin/python benchmarks/guarded_index.py --store chroma --sizes 1000 10000 100000
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_quick, command_line, cpu_label, machine_info, offline, shown, write_result

NAME = "guarded_index"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (200, 2_000)
DIM, VOCABULARY, WORDS_PER_DOC, BATCH, CHANGED = 384, 5_000, 10, 1_000, 100
#: The stores measured, and the driver each is measured through.
STORES = {
    "memory": "ctxemb_core.index.MemoryDriver (transactions, write mark)",
    "pgvector": "ctxemb_pgvector.PgvectorDriver (PostgreSQL 18 + pgvector, unix socket, no HNSW)",
    "chroma": "ctxemb_chroma.ChromaDriver (embedded; its sequence numbers as the mark)",
}
#: The canary's probe words, so that no probe embeds to zeros under the static model.
PROBE_WORDS = ("the", "what", "mitochondria", "café")


def static_embedder(work: Path) -> Any:
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.static import static_from_vectors

    rng = np.random.default_rng(0)
    words = [*(f"w{k}" for k in range(VOCABULARY)), *PROBE_WORDS]
    lines = [w + " " + " ".join(f"{v:.4f}" for v in rng.normal(size=DIM)) for w in words]
    (work / "vectors.txt").write_text("\n".join(lines), encoding="utf-8")
    return Embedder(contract_for(static_from_vectors(work / "vectors.txt", work / "model")))


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, VOCABULARY, size=(n, WORDS_PER_DOC))
    return [f"d{k}" for k in range(n)], [" ".join(f"w{x}" for x in row) for row in draws.tolist()]


class Counting:
    """A store's driver that counts the ids and records each read returns; ``marks=False``
    hides the store's write mark, so that the guard lists every id (the reference)."""

    def __init__(self, driver: Any, marks: bool) -> None:
        import dataclasses

        self._driver = driver
        self.capabilities = dataclasses.replace(
            driver.capabilities, marks=driver.capabilities.marks and marks
        )
        self.read_counts: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    @property
    def name(self) -> str:
        return str(self._driver.name)

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        got: list[str] = self._driver.ids(offset, limit)
        self.read_counts["ids"] += len(got)
        return got

    def page(self, offset: int, limit: int, *args: Any) -> Any:
        got = self._driver.page(offset, limit, *args)
        self.read_counts["records"] += len(got)
        return got

    def read(self, ids: Any, *args: Any) -> Any:
        got = self._driver.read(ids, *args)
        self.read_counts["records"] += len(got)
        return got

    # the rest of the protocol, spelled out (a runtime protocol check does not see __getattr__'s)
    def describe(self) -> str:
        return str(self._driver.describe())

    def storage_for(self, stamp: Any) -> Any:
        return self._driver.storage_for(stamp)

    def head(self) -> Any:
        return self._driver.head()

    def read_stamp(self) -> Any:
        return self._driver.read_stamp()

    def create(self, stamp: Any) -> bool:
        return bool(self._driver.create(stamp))

    def write_stamp(self, *args: Any, **kwargs: Any) -> Any:
        return self._driver.write_stamp(*args, **kwargs)

    def count(self) -> int:
        return int(self._driver.count())

    def changes(self, *args: Any, **kwargs: Any) -> Any:
        return self._driver.changes(*args, **kwargs)

    def write(self, *args: Any, **kwargs: Any) -> Any:
        return self._driver.write(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._driver.delete(*args, **kwargs)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self._driver.search(*args, **kwargs)


def timed_open(store: Any, embedder: Any, marks: bool, repeats: int) -> dict[str, Any]:
    """A verified open through a new driver of the index (``store()`` makes one)."""
    from ctxemb_core.index import GuardedIndex

    times, counts, check = [], Counter[str](), None
    for _ in range(repeats):
        driver = Counting(store(), marks)
        start = time.perf_counter()
        check = GuardedIndex.open(driver, embedder).open_check
        times.append(time.perf_counter() - start)
        counts = driver.read_counts
    assert check is not None
    return {
        "seconds": round(statistics.median(times), 5),
        "ids_read": counts["ids"],
        "records_read": counts["records"],
        "re_embedded": check.checked,
        "changed": check.changed,
    }


def sync_all(index: Any, ids: list[str], texts: list[str]) -> tuple[float, Any]:
    from ctxemb_core.sync import SyncReport

    report = SyncReport()
    start = time.perf_counter()
    for k in range(0, len(ids), BATCH):
        report = report + index.sync(ids[k : k + BATCH], texts[k : k + BATCH])
    return time.perf_counter() - start, report


@contextlib.contextmanager
def drivers(kind: str, work: Path) -> Iterator[Callable[[str], Any]]:
    """``name -> a new driver of index name`` in a store of ``kind``, made in ``work``."""
    if kind == "memory":
        from ctxemb_core.index import MemoryStore

        store = MemoryStore()
        yield store.driver
    elif kind == "pgvector":
        import pgserver

        from ctxemb_pgvector import PgvectorDriver, connect

        server = pgserver.get_server(str(work / "pg"), cleanup_mode="stop")
        try:
            conn = connect(str(server.get_uri()))
            # No HNSW index: what is measured is the guard's reading, not the graph's building.
            yield lambda name: PgvectorDriver(conn, name, hnsw=False)
            conn.close()
        finally:
            server.cleanup()
    else:
        from ctxemb_chroma import ChromaDriver
        from ctxemb_chroma import connect as chroma_connect

        client = chroma_connect(str(work / "chroma"))
        yield lambda name: ChromaDriver(client, name)


def measure(n: int, embedder: Any, repeats: int, make: Callable[[str], Any]) -> dict[str, Any]:
    from ctxemb_core.index import GuardedIndex

    name = f"docs{n}"
    store = functools.partial(make, name)
    ids, texts = corpus(n)
    index = GuardedIndex.open(store(), embedder)
    step = min(5_000, index.driver.capabilities.max_batch or 5_000)
    start = time.perf_counter()
    for k in range(0, n, step):
        index.add(ids[k : k + step], texts[k : k + step])
    load = time.perf_counter() - start
    row: dict[str, Any] = {"records": n, "load_seconds": round(load, 3)}
    for marks in (True, False):  # the first open of each makes its verified record
        timed_open(store, embedder, marks, 1)
    row["open_with_mark"] = timed_open(store, embedder, True, repeats)
    row["open_listing_ids"] = timed_open(store, embedder, False, repeats)
    noop, report = sync_all(index, ids, texts)
    assert report.embedded == 0, report
    row["noop_sync_seconds"] = round(noop, 4)
    changed = list(texts)
    for k in np.linspace(0, n - 1, CHANGED).astype(int).tolist():
        changed[k] = texts[k] + " w1"
    seconds, report = sync_all(index, ids, changed)
    row["sync_100_changed_seconds"] = round(seconds, 4)
    row["sync_100_changed_embedded"] = report.embedded
    row["open_after_change_with_mark"] = timed_open(store, embedder, True, 1)
    row["open_after_change_listing_ids"] = timed_open(store, embedder, False, 1)
    row["ratio_open_listing_over_mark"] = round(
        row["open_listing_ids"]["seconds"] / max(row["open_with_mark"]["seconds"], 1e-9), 2
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: the same index opened by listing every id, measured in the same run.",
        epilog=f"Writes benchmarks/results/{NAME}.json (or --out). With --quick: a temporary "
        "folder (or --out), never benchmarks/results/.",
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    parser.add_argument("--repeats", type=int, default=5, help="timed opens per figure (median)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="records")
    parser.add_argument(
        "--store",
        choices=tuple(STORES),
        default="memory",
        help="the store's driver (default: the in-memory reference driver)",
    )
    add_quick(parser, f"indexes of {QUICK_SIZES} records, 2 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.sizes = min(args.repeats, 2), list(QUICK_SIZES)
    offline()
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="ctxemb-guarded-") as tmp,
        drivers(args.store, Path(tmp)) as make,
    ):
        embedder = static_embedder(Path(tmp))
        for n in args.sizes:
            row = measure(n, embedder, args.repeats, make)
            rows.append(row)
            mark, listed = row["open_with_mark"], row["open_listing_ids"]
            print(
                f"{n:>9,} records: open {mark['seconds'] * 1e3:7.2f} ms with the mark "
                f"({mark['ids_read']} ids read, {mark['re_embedded']} re-embedded), "
                f"{listed['seconds'] * 1e3:7.2f} ms listing ids ({listed['ids_read']:,} read, "
                f"{listed['re_embedded']} re-embedded, x{row['ratio_open_listing_over_mark']}); "
                f"no-op sync {row['noop_sync_seconds']:.3f} s; 100 changed "
                f"{row['sync_100_changed_seconds']:.3f} s; open after it "
                f"{row['open_after_change_with_mark']['seconds'] * 1e3:.2f} ms "
                f"({row['open_after_change_with_mark']['re_embedded']} re-embedded)",
                flush=True,
            )
    info = machine_info()
    out = write_result(
        NAME if args.store == "memory" else f"{NAME}_{args.store}",
        {
            "cpu": cpu_label(info["cpu"]),
            "driver": STORES[args.store],
            "model": f"static, {DIM} dimensions, {VOCABULARY} words, {WORDS_PER_DOC} a text",
            "sizes": rows,
            "command": command_line(),
            "machine": info,
        },
        args.out,
        quick=args.quick,
    )
    print(f"written to {shown(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
