"""A live model upgrade of SciFact through an alias, under load: what readers and a writer see.

The corpus is indexed under MiniLM fp32 into an embedded Chroma store (or PostgreSQL with
``--store pgvector``), an alias is created over it, and while 4 reader threads query it
continuously and 1 writer adds, updates and deletes documents through it, the alias is upgraded
(``--to int8``: int8 weights, ``quantization=int8-dynamic-pc-v1``; ``--to dim256``:
``truncate_dim=256``): shadow, backfill, gates (nDCG@10 on SciFact's qrels, both contracts'
figures reported), cutover, then a rollback. Measured and checked:

- **failed queries** (any error but a reader's ``NoEncoderError``) and **mixed results**: a
  result whose index is not the one its query's contract is stamped on (each result carries its
  index, the contract fingerprint it was embedded under and the alias generation); both must be 0;
- **writes kept**: every write made during the upgrade is in both indexes after the cutover, and
  again after the rollback (ids and text digests);
- **switch latency**: from the cutover's atomic switch until every reader has queried the new
  index (the longest of the readers');
- **backfill rate** (documents re-embedded per second) and the **dual-write cost**: the writer's
  median write while the alias writes two indexes, over its median before the upgrade (a ratio).

Run:  .venv/bin/python benchmarks/alias_upgrade.py            (all 5,183 documents; the two
      embeddings of the corpus dominate, ~15 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_DATA,
    MODEL,
    add_quick,
    command_line,
    cpu_label,
    machine_info,
    offline,
    quiet_truncation,
    write_result,
    writes,
)

NAME = "alias_upgrade"
TARGETS = {"int8": {"quantization": "int8-dynamic-pc-v1"}, "dim256": {"truncate_dim": 256}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes(f"{NAME}_<store>_<to>")
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    p.add_argument(
        "--to",
        choices=sorted(TARGETS),
        help="the new contract (default: int8; with --quick dim256, which needs no int8 export)",
    )
    p.add_argument("--store", choices=["chroma", "pgvector"], default="chroma")
    p.add_argument("--dsn", help="with --store pgvector: a server (default: a throwaway one)")
    p.add_argument("--n", type=int, default=None, help="documents (default: all)")
    p.add_argument("--readers", type=int, default=4, help="reader threads")
    p.add_argument("--out", type=Path, help="where the result JSON goes")
    add_quick(p, "16 documents, 1 reader, --to dim256 unless given")
    return p.parse_args(argv)


def _catalog(args: argparse.Namespace, folder: Path) -> tuple[Any, Any, Any]:
    """The store's catalog, its client, and a function that gives each thread a catalog of its
    own: a Chroma client serves threads; a psycopg connection runs one transaction at a time,
    so each PostgreSQL thread connects (as a pool would give it a connection)."""
    if args.store == "chroma":
        import ctxemb_chroma

        client = ctxemb_chroma.connect(str(folder / "chroma"))
        catalog = ctxemb_chroma.catalog(client)
        return catalog, client, lambda: catalog
    import ctxemb_pgvector

    dsn = args.dsn or ctxemb_pgvector.local_server(folder / "pg")
    conn = ctxemb_pgvector.connect(dsn)
    return (
        ctxemb_pgvector.catalog(conn),
        conn,
        lambda: ctxemb_pgvector.catalog(ctxemb_pgvector.connect(dsn)),
    )


class Load:
    """Reader threads and one writer through the alias, recording what each call returned."""

    def __init__(self, open_aliased: Any, queries: list[str], readers: int) -> None:
        self.open_aliased = open_aliased
        self.queries = queries
        self.stop = threading.Event()
        self.failed: list[str] = []
        self.mixed = 0
        self.served = 0
        self.seen: dict[int, dict[int, float]] = {}  # reader -> generation -> first time seen
        self.stamps: dict[str, str] = {}  # index -> fingerprint (each answer must agree)
        self.writes: list[tuple[float, float, str]] = []  # (start, seconds, id)
        self.written: set[str] = set()
        self.deleted: set[str] = set()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self.read, args=(r,), daemon=True) for r in range(readers)
        ] + [threading.Thread(target=self.write, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def read(self, reader: int) -> None:
        aliased = self.open_aliased()
        k = 0
        while not self.stop.is_set():
            try:
                got = aliased.search(self.queries[k % len(self.queries)], 10)
            except Exception as exc:
                self.failed.append(f"{type(exc).__name__}: {exc}")
                continue
            finally:
                k += 1
            with self.lock:
                self.served += 1
                known = self.stamps.setdefault(got.index, got.fingerprint)
                self.mixed += known != got.fingerprint
                self.seen.setdefault(reader, {}).setdefault(got.generation, time.perf_counter())

    def write(self) -> None:
        """Adds, updates and deletes its own documents (``live-*``, metadata ``set: live``),
        never SciFact's: the gate then measures the corpus as published, beside live writes."""
        aliased = self.open_aliased()
        k = 0
        mine: list[str] = []
        while not self.stop.is_set():
            k += 1
            new_id = f"live-{k}"
            started = time.perf_counter()
            try:
                if k % 3 == 0 and mine:
                    gone = mine.pop(0)
                    aliased.delete([gone])
                    self.deleted.add(gone)
                    self.written.discard(gone)
                else:
                    target = mine[k % len(mine)] if k % 3 == 1 and mine else new_id
                    text = f"Live text {k} about tea, cells and proteins."
                    aliased.upsert([target], [text], [{"set": "live"}])
                    self.written.add(target)
                    if target == new_id:
                        mine.append(new_id)
            except Exception as exc:
                self.failed.append(f"writer {type(exc).__name__}: {exc}")
                continue
            self.writes.append((started, time.perf_counter() - started, new_id))
            time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    offline()
    quiet_truncation()
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.aliases import (
        AliasedIndex,
        Encoders,
        QualityGate,
        backfill,
        begin_upgrade,
        create_alias,
        cutover,
        rollback,
        text_digests,
    )
    from ctxemb_core.cache import EmbeddingCache
    from ctxemb_core.eval.beir import document_text, load_beir
    from ctxemb_core.index import GuardedIndex

    data = load_beir(args.data / "scifact")
    args.to = args.to or ("dim256" if args.quick else "int8")
    n = 16 if args.quick else args.n
    ids = sorted(data.corpus)[:n] if n else sorted(data.corpus)
    readers = 1 if args.quick else args.readers
    old = Embedder(contract_for(MODEL))
    new = Embedder(contract_for(MODEL, **TARGETS[args.to]))
    queries = [data.queries[q] for q in sorted(data.qrels)]
    with tempfile.TemporaryDirectory(prefix="ctxemb-alias-bench-") as tmp:
        catalog, client, per_thread = _catalog(args, Path(tmp))
        first = "scifact-v1" if args.store == "chroma" else "scifact_v1"
        # The first index's vectors may come from the embedding cache (the corpus under fp32,
        # which the evaluation runs keep); the backfill under the new contract never does.
        builder = Embedder(contract_for(MODEL), cache=EmbeddingCache())
        index = GuardedIndex.open(catalog.driver(first), builder)
        started = time.perf_counter()
        for s in range(0, len(ids), 256):
            batch = ids[s : s + 256]
            texts = [document_text(data.corpus[i]) for i in batch]
            index.add(batch, texts, [{"set": "scifact"}] * len(batch))
        indexed = time.perf_counter() - started
        create_alias(catalog, "scifact", first)
        encoders = Encoders(old, new)
        load = Load(lambda: AliasedIndex.open(per_thread(), "scifact", encoders), queries, readers)
        load.start()
        try:
            # A baseline for the dual-write cost: the writer's writes into one index first.
            baseline = 3 if args.quick else 30
            deadline = time.perf_counter() + 600
            while len(load.writes) < baseline and time.perf_counter() < deadline:
                time.sleep(0.1)
            upgrade_started = time.perf_counter()
            record = begin_upgrade(catalog, "scifact", new)
            report = backfill(catalog, "scifact", encoders, progress=not args.quick)
            judged = {q: data.queries[q] for q in data.qrels}
            gate = (
                QualityGate(judged, data.qrels, floor=0.9, where={"set": "scifact"})
                if not args.quick
                else None
            )
            gates = []
            switched = cutover(catalog, "scifact", encoders, quality=gate, on_gate=gates.append)
            switch_time = time.perf_counter()
            time.sleep(0.3 if args.quick else 5.0)
        finally:  # the threads stop whatever happened (a failed gate included)
            load.finish()
        assert record.shadow is not None
        after_cutover = text_digests(catalog, record.shadow.index, new) == text_digests(
            catalog, first, old
        )
        rollback(catalog, "scifact", encoders)
        after_rollback = text_digests(catalog, record.shadow.index, new) == text_digests(
            catalog, first, old
        )
        client.close()
    latency = max(
        (
            gens[switched.generation] - switch_time
            for gens in load.seen.values()
            if switched.generation in gens
        ),
        default=float("nan"),
    )
    before = [s for t, s, _ in load.writes if t < upgrade_started]
    during = [s for t, s, _ in load.writes if upgrade_started <= t < switch_time]
    dual = statistics.median(during) / statistics.median(before) if before and during else None
    payload = {
        "benchmark": NAME,
        "quick": args.quick,
        "store": args.store,
        "to": args.to,
        "documents": len(ids),
        "readers": readers,
        "index_seconds": round(indexed, 2),
        "queries_served": load.served,
        "failed_queries": len(load.failed),
        "failures": load.failed[:5],
        "mixed_results": load.mixed,
        "writes": len(load.writes),
        "writes_kept_after_cutover": after_cutover,
        "writes_kept_after_rollback": after_rollback,
        "backfill": {"written": report.written, "rate": round(report.rate, 1)},
        "switch_latency_s": round(latency, 4),
        "dual_write_ratio_p50": None if dual is None else round(dual, 3),
        "gates": [
            {"name": g.name, "passed": g.passed, "figure": g.figure, "detail": g.detail}
            for g in gates
        ],
        "machine": machine_info(),
        "command": command_line(),
    }
    path = write_result(f"{NAME}_{args.store}_{args.to}", payload, args.out, quick=args.quick)
    print(
        f"alias upgrade of {len(ids)} SciFact documents to {args.to} on {args.store} "
        f"({cpu_label()}):"
    )
    print(f"  queries {load.served}, failed {len(load.failed)}, mixed {load.mixed}")
    print(
        f"  writes {len(load.writes)}: kept after cutover {after_cutover}, after rollback "
        f"{after_rollback}"
    )
    print(
        f"  backfill {report.rate:.1f} docs/s; switch latency {latency:.4f} s; dual-write "
        f"ratio p50 {dual if dual is None else round(dual, 3)}"
    )
    for g in gates:
        print(f"  gate {g}")
    print(f"wrote {path}")
    return 0 if not load.failed and not load.mixed and after_cutover and after_rollback else 1


if __name__ == "__main__":
    sys.exit(main())
