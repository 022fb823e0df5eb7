"""The guard's own costs through GuardedIndex, at 1k / 10k / 100k / 1M records, per store: an
open, an open after writes, a no-op sync of one batch and a sync of 100 changed texts (issue
44, item 8: costs that do not grow with the index).

Issue 44 measured the guard reading every id on every open (0.35 s at 100k on Chroma) and the
verified-open record dropped above 200,000 records. A driver that keeps a write mark lets the
guard ask "what was written since the last verified open" instead. Measured through each
store's driver (``--store``: the reference in-memory driver, where only the guard's costs show;
embedded Chroma, whose mark is the sequence number Chroma's SQLite gives every write; a
throwaway PostgreSQL from ``ctxemb_pgvector.local_server``, whose mark is the row sequence read
under a check of the table's lock holders, without HNSW), with a static model of 384 dimensions
(numpy only: the embedding is not what is measured). Every figure is the median of
``--repeats``; beside it, each store call's median milliseconds (``store_ms``: ``count`` and
``changes`` apart) and the rest (``guard_ms``: stamp, canary, the record in the cache folder):

1. **Open** (``open_with_mark``): a verified open of an unchanged index through a new driver
   (stamp, canary, and the record of the last verified state), warm. Goal: no id read, nothing
   counted or re-embedded, flat in N. The reference (``open_listing_ids``, same run): a driver
   without its mark, every id listed and compared, as a Chroma server's client does; above
   200,000 records (``MAX_RECORDED``) no record is kept. Through a store's driver it is
   measured up to ``--listed-up-to`` records (default 100,000: a store pages its ids by offset).
2. **Open in a new process** (stores only): the same open in a fresh process (this script's
   ``--child``), the record read from the cache folder, the store reached anew; with
   PostgreSQL also after the server was stopped and started again by the new process.
3. **Open after 1 record written**, **after 100** (through ctxemb, between two opens): the open
   re-embeds what was written; with fewer written than the sample (16), the sample is filled by
   one run of random others: the records are counted, then one page is read at a random offset.
4. **No-op sync of one 1,000-text batch** (``noop_sync_1000``): the digests compared, nothing
   embedded or written; the guard's share is a head read per call.
5. **Sync of 100 changed texts** (``sync_100_changed``, spread over the corpus, one call): the
   guard's share (``guard_ms``) is all but the embedding (``embed_ms``) and the store's write.

Run:  .venv/bin/python benchmarks/guarded_index.py   (~2 minutes and ~2.7 GB for the 1M index)
      .venv/bin/python benchmarks/guarded_index.py --store pgvector   (~4 minutes, 1M rows)
      .venv/bin/python benchmarks/guarded_index.py --store chroma --sizes 1000 10000 100000
      (~3.5 minutes: Chroma's load of 100k records alone takes over 2)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_quick, command_line, cpu_label, machine_info, offline, shown, write_result

NAME = "guarded_index"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (200, 2_000)
DIM, VOCABULARY, WORDS_PER_DOC, BATCH, CHANGED = 384, 5_000, 10, 1_000, 100
#: Through a store's driver, the reference open (every id listed) is measured up to this size:
#: a store pages ids by offset, so listing them grows faster than N.
LISTED_UP_TO = 100_000
#: The stores measured, and the driver each is measured through.
STORES = {
    "memory": "ctxemb_core.index.MemoryDriver (transactions, write mark)",
    "pgvector": "ctxemb_pgvector.PgvectorDriver (PostgreSQL + pgvector from local_server, unix "
    "socket, no HNSW)",
    "chroma": "ctxemb_chroma.ChromaDriver (embedded; its sequence numbers as the mark)",
}
#: The canary's probe words, so that no probe embeds to zeros under the static model.
PROBE_WORDS = ("the", "what", "mitochondria", "café")


def static_embedder(work: Path) -> tuple[Any, Path]:
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.static import static_from_vectors

    rng = np.random.default_rng(0)
    words = [*(f"w{k}" for k in range(VOCABULARY)), *PROBE_WORDS]
    lines = [w + " " + " ".join(f"{v:.4f}" for v in rng.normal(size=DIM)) for w in words]
    (work / "vectors.txt").write_text("\n".join(lines), encoding="utf-8")
    model = static_from_vectors(work / "vectors.txt", work / "model")
    return Embedder(contract_for(model)), model


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, VOCABULARY, size=(n, WORDS_PER_DOC))
    return [f"d{k}" for k in range(n)], [" ".join(f"w{x}" for x in row) for row in draws.tolist()]


class Counting:
    """A store's driver that counts the ids and records each read returns and times each call
    (``seconds``: the store's share of what the guard does); ``marks=False`` hides the store's
    write mark, so that the guard lists every id (the reference)."""

    def __init__(self, driver: Any, marks: bool) -> None:
        self._driver = driver
        self.capabilities = dataclasses.replace(
            driver.capabilities, marks=driver.capabilities.marks and marks
        )
        self.read_counts: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def reset(self) -> None:
        self.read_counts.clear()
        self.seconds.clear()

    def _timed(self, method: str, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return getattr(self._driver, method)(*args, **kwargs)
        finally:
            self.seconds[method] += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    @property
    def name(self) -> str:
        return str(self._driver.name)

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        got: list[str] = self._timed("ids", offset, limit)
        self.read_counts["ids"] += len(got)
        return got

    def page(self, offset: int, limit: int, *args: Any) -> Any:
        got = self._timed("page", offset, limit, *args)
        self.read_counts["records"] += len(got)
        return got

    def page_near(self, fraction: float, limit: int, *args: Any) -> Any:
        got = self._timed("page_near", fraction, limit, *args)
        self.read_counts["records"] += len(got)
        return got

    def read(self, ids: Any, *args: Any) -> Any:
        got = self._timed("read", ids, *args)
        self.read_counts["records"] += len(got)
        return got

    # the rest of the protocol, spelled out (a runtime protocol check does not see __getattr__'s)
    def describe(self) -> str:
        return str(self._timed("describe"))

    def storage_for(self, stamp: Any) -> Any:
        return self._driver.storage_for(stamp)

    def head(self) -> Any:
        return self._timed("head")

    def read_stamp(self) -> Any:
        return self._timed("read_stamp")

    def create(self, stamp: Any) -> bool:
        return bool(self._timed("create", stamp))

    def write_stamp(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("write_stamp", *args, **kwargs)

    def count(self) -> int:
        return int(self._timed("count"))

    def changes(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("changes", *args, **kwargs)

    def write(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("write", *args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("delete", *args, **kwargs)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("search", *args, **kwargs)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each store call's median milliseconds over ``runs`` (0 in a run that did not make it)."""
    calls = sorted({k for run in runs for k in run})
    return {k: _ms(statistics.median(run.get(k, 0.0) for run in runs)) for k in calls}


def timed_open(store: Any, embedder: Any, marks: bool, repeats: int) -> dict[str, Any]:
    """A verified open through a new driver of the index (``store()`` makes one): its median
    seconds, what it read and re-embedded, each store call's median milliseconds (``store_ms``:
    ``count`` and ``changes`` apart) and the rest, the guard's own (``guard_ms``: the stamp, the
    canary's embedding, the record read from the cache folder)."""
    from ctxemb_core.index import GuardedIndex

    times, calls, rest, counts, check = [], [], [], Counter[str](), None
    for _ in range(repeats):
        driver = Counting(store(), marks)
        start = time.perf_counter()
        check = GuardedIndex.open(driver, embedder).open_check
        took = time.perf_counter() - start
        times.append(took)
        calls.append(dict(driver.seconds))
        rest.append(took - sum(driver.seconds.values()))
        counts = driver.read_counts
    assert check is not None
    return {
        "seconds": round(statistics.median(times), 5),
        "ids_read": counts["ids"],
        "records_read": counts["records"],
        "re_embedded": check.checked,
        "changed": check.changed,
        "counted": check.records is not None,
        "store_ms": _medians(calls),
        "guard_ms": _ms(statistics.median(rest)),
    }


class Timed:
    """The embedder's ``embed_documents`` timed (what a sync spends embedding, taken out of the
    guard's share)."""

    def __init__(self, embedder: Any) -> None:
        self.seconds = 0.0
        self._embed = embedder.embed_documents
        embedder.embed_documents = self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._embed(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def timed_sync(
    index: Any, embedding: Timed, ids: list[str], texts: list[str], embedded: int
) -> dict[str, Any]:
    """One ``sync`` call of ``ids``: its seconds, the embedding's, each store call's (``write``
    is the store writing), and the guard's share: all but the embedding and the write."""
    driver = index.driver
    driver.reset()
    embedding.seconds = 0.0
    start = time.perf_counter()
    report = index.sync(ids, texts)
    took = time.perf_counter() - start
    assert report.embedded == embedded, report
    return {
        "seconds": took,
        "embed": embedding.seconds,
        "calls": dict(driver.seconds),
        "guard": took - embedding.seconds - driver.seconds.get("write", 0.0),
    }


def sync_figure(runs: list[dict[str, Any]], texts: int) -> dict[str, Any]:
    return {
        "texts": texts,
        "seconds": round(statistics.median(r["seconds"] for r in runs), 5),
        "embed_ms": _ms(statistics.median(r["embed"] for r in runs)),
        "store_ms": _medians([r["calls"] for r in runs]),
        "guard_ms": _ms(statistics.median(r["guard"] for r in runs)),
    }


class Store:
    """Drivers of indexes in one store of ``kind``, made in ``work``; a PostgreSQL server can be
    stopped (:meth:`stop`) for a new process to start it again."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind, self.folder = kind, work / kind
        self._conn: Any = None
        if kind == "memory":
            from ctxemb_core.index import MemoryStore

            self._memory = MemoryStore()
        elif kind == "chroma":
            from ctxemb_chroma import connect as chroma_connect

            self._client = chroma_connect(str(self.folder))

    def make(self, name: str) -> Any:
        """A new driver of index ``name``."""
        if self.kind == "memory":
            return self._memory.driver(name)
        if self.kind == "chroma":
            from ctxemb_chroma import ChromaDriver

            return ChromaDriver(self._client, name)
        from ctxemb_pgvector import PgvectorDriver, connect, local_server

        if self._conn is None:
            self._conn = connect(local_server(self.folder))
        # No HNSW index: what is measured is the guard's reading, not the graph's building.
        return PgvectorDriver(self._conn, name, hnsw=False)

    def stop(self) -> None:
        """Stop this process's PostgreSQL server (the next :meth:`make` starts it again)."""
        if self.kind == "pgvector" and self._conn is not None:
            import pgserver

            self._conn.close()
            self._conn = None
            pgserver.get_server(str(self.folder.resolve())).cleanup()

    def close(self) -> None:
        self.stop()


def in_new_process(store: Store, name: str, model: Path) -> dict[str, Any]:
    """A verified open in a new process (this script's ``--child``): the record of the last
    verified open read from the cache folder, the store reached anew."""
    spec = {"store": store.kind, "folder": str(store.folder), "name": name, "model": str(model)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"the new process failed:\n{done.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    got["process_seconds"] = round(wall, 3)
    return got


def child(spec: dict[str, str]) -> None:
    """The new process's part: reach the store, load the model, open twice; JSON on stdout."""
    began = time.perf_counter()
    from ctxemb_core import Embedder, contract_for

    work = Path(spec["folder"]).parent
    store = Store(spec["store"], work)
    driver = store.make(spec["name"])  # a PostgreSQL server is started here when none runs
    reached = time.perf_counter()
    embedder = Embedder(contract_for(Path(spec["model"])))
    loaded = time.perf_counter()
    make = functools.partial(store.make, spec["name"])
    first = timed_open(make, embedder, True, 1)
    second = timed_open(make, embedder, True, 1)
    del driver
    store.close()
    out = {
        "store_reached_seconds": round(reached - began, 3),
        "model_loaded_seconds": round(loaded - reached, 3),
        "open": first,
        "open_again": second,
    }
    print(json.dumps(out), flush=True)


def measure(
    n: int, embedder: Any, model: Path, repeats: int, store: Store, listed: bool
) -> dict[str, Any]:
    from ctxemb_core.index import GuardedIndex

    name = f"docs{n}"
    make = functools.partial(store.make, name)
    ids, texts = corpus(n)
    original = list(texts)
    index = GuardedIndex.open(Counting(make(), True), embedder)
    step = min(5_000, index.driver.capabilities.max_batch or 5_000)
    start = time.perf_counter()
    for k in range(0, n, step):
        index.add(ids[k : k + step], texts[k : k + step])
    load = time.perf_counter() - start
    row: dict[str, Any] = {"records": n, "load_seconds": round(load, 3)}
    for marks in (True, False)[: 1 + listed]:  # the first open of each makes its record
        timed_open(make, embedder, marks, 1)
    row["open_with_mark"] = timed_open(make, embedder, True, repeats)
    if listed:
        row["open_listing_ids"] = timed_open(make, embedder, False, repeats)
        row["ratio_open_listing_over_mark"] = round(
            row["open_listing_ids"]["seconds"] / max(row["open_with_mark"]["seconds"], 1e-9), 2
        )
    embedding = Timed(index.embedder)
    rounds = iter(range(1, VOCABULARY))

    def change(picked: list[int]) -> dict[str, Any]:
        word = f" w{next(rounds)}"  # another text each round: each sync embeds and writes them
        for k in picked:
            texts[k] = original[k] + word
        return timed_sync(
            index, embedding, [ids[k] for k in picked], [texts[k] for k in picked], len(picked)
        )

    # An open after 1 record written (through ctxemb): what changed, then one run of others.
    opens = []
    for r in range(repeats):
        change([(r * 7_919 + n // 3) % n])
        opens.append(timed_open(make, embedder, True, 1))
    row["open_after_1_written"] = _median_open(opens)
    # A sync of 100 changed texts (spread over the corpus), then the open after it.
    spread = np.linspace(0, n - 1, CHANGED).astype(int).tolist()
    syncs, opens = [], []
    for _ in range(repeats):
        syncs.append(change(spread))
        opens.append(timed_open(make, embedder, True, 1))
    row["sync_100_changed"] = sync_figure(syncs, CHANGED)
    row["open_after_100_written"] = _median_open(opens)
    # A no-op sync of one batch of 1,000 (as `ctxemb index` sends them): digests compared.
    middle = slice(max(0, n // 2 - BATCH // 2), max(0, n // 2 - BATCH // 2) + BATCH)
    noop = [timed_sync(index, embedding, ids[middle], texts[middle], 0) for _ in range(repeats)]
    row["noop_sync_1000"] = sync_figure(noop, len(ids[middle]))
    if store.kind != "memory":  # the record read from the cache folder by another process
        runs = [in_new_process(store, name, model) for _ in range(min(repeats, 3))]
        row["open_in_new_process"] = _median_child(runs)
    if store.kind == "pgvector":  # ... after the server was stopped and started again
        runs = []
        for _ in range(min(repeats, 2)):
            store.stop()  # this process's handle was the last: the server stops
            runs.append(in_new_process(store, name, model))  # it starts the server again
        row["open_after_server_restart"] = _median_child(runs)
    return row


def _median_open(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of single opens, the median of each (counts from the last)."""
    out = dict(runs[-1])
    out["seconds"] = round(statistics.median(r["seconds"] for r in runs), 5)
    out["guard_ms"] = round(statistics.median(r["guard_ms"] for r in runs), 3)
    calls = sorted({k for r in runs for k in r["store_ms"]})
    out["store_ms"] = {
        k: round(statistics.median(r["store_ms"].get(k, 0.0) for r in runs), 3) for k in calls
    }
    out["repeats"] = len(runs)
    return out


def _median_child(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "open": _median_open([r["open"] for r in runs]),
        "open_again": _median_open([r["open_again"] for r in runs]),
        **{
            k: round(statistics.median(r[k] for r in runs), 3)
            for k in ("store_reached_seconds", "model_loaded_seconds", "process_seconds")
        },
    }


def _line(row: dict[str, Any]) -> str:
    n, mark = row["records"], row["open_with_mark"]
    one, hundred = row["open_after_1_written"], row["open_after_100_written"]
    noop, synced = row["noop_sync_1000"], row["sync_100_changed"]
    text = (
        f"{n:>9,} records: open {mark['seconds'] * 1e3:7.2f} ms ({mark['ids_read']} ids, "
        f"{mark['records_read']} records read, {mark['re_embedded']} re-embedded)"
    )
    if "open_listing_ids" in row:
        listed = row["open_listing_ids"]
        text += (
            f", {listed['seconds'] * 1e3:.2f} ms listing ids ({listed['ids_read']:,} read, "
            f"x{row['ratio_open_listing_over_mark']})"
        )
    for key, said in (
        ("open_in_new_process", "new process"),
        ("open_after_server_restart", "restart"),
    ):
        if key in row:
            text += f"; {said} {row[key]['open']['seconds'] * 1e3:.2f} ms"
    text += (
        f"; after 1 written {one['seconds'] * 1e3:.2f} ms (count "
        f"{one['store_ms'].get('count', 0):.2f}, page {one['store_ms'].get('page', 0):.2f}, "
        f"page_near {one['store_ms'].get('page_near', 0):.2f}, "
        f"changes {one['store_ms'].get('changes', 0):.2f} ms), after 100 "
        f"{hundred['seconds'] * 1e3:.2f} ms; no-op sync of {noop['texts']:,} "
        f"{noop['seconds'] * 1e3:.2f} ms "
        f"(guard {noop['guard_ms']:.2f}); 100 changed {synced['seconds'] * 1e3:.2f} ms (guard "
        f"{synced['guard_ms']:.2f}, embedding {synced['embed_ms']:.2f} ms)"
    )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: the same index opened by listing every id, measured in the same run.",
        epilog=f"Writes benchmarks/results/{NAME}.json (--store memory) or {NAME}_STORE.json "
        "(or --out). With --quick: a temporary folder (or --out), never benchmarks/results/.",
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="records")
    parser.add_argument(
        "--store",
        choices=tuple(STORES),
        default="memory",
        help="the store's driver (default: the in-memory reference driver)",
    )
    parser.add_argument(
        "--listed-up-to",
        type=int,
        default=None,
        help="measure the reference open (every id listed) up to this many records (default: "
        f"every size in memory, {LISTED_UP_TO:,} through a store)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_quick(parser, f"indexes of {QUICK_SIZES} records, 2 repeats")
    args = parser.parse_args(argv)
    if args.child is not None:
        child(json.loads(args.child))
        return 0
    if args.quick:
        args.repeats, args.sizes = min(args.repeats, 2), list(QUICK_SIZES)
    listed_up_to = args.listed_up_to
    if listed_up_to is None:
        listed_up_to = max(args.sizes) if args.store == "memory" else LISTED_UP_TO
    offline()
    rows = []
    cache = os.environ.get("CTXEMB_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="ctxemb-guarded-") as tmp:
        # The verified-open records of throwaway indexes, kept with them (a new process reads
        # them here too: it inherits the environment).
        os.environ["CTXEMB_CACHE_DIR"] = str(Path(tmp) / "cache")
        store = Store(args.store, Path(tmp))
        try:
            embedder, model = static_embedder(Path(tmp))
            for n in args.sizes:
                row = measure(n, embedder, model, args.repeats, store, n <= listed_up_to)
                rows.append(row)
                print(_line(row), flush=True)
        finally:
            store.close()
            if cache is None:
                os.environ.pop("CTXEMB_CACHE_DIR", None)
            else:
                os.environ["CTXEMB_CACHE_DIR"] = cache
    info = machine_info()
    out = write_result(
        NAME if args.store == "memory" else f"{NAME}_{args.store}",
        {
            "cpu": cpu_label(info["cpu"]),
            "cpu_model_name": info["cpu_model"],
            "store": args.store,
            "driver": STORES[args.store],
            "model": f"static, {DIM} dimensions, {VOCABULARY} words, {WORDS_PER_DOC} a text",
            "repeats": args.repeats,
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
