"""Cold query: one ``ctxemb query`` process on SciFact, with and without the open-time sample.

Each run is a new ``ctxemb query`` process (interpreter start to exit, wall clock) against an
embedded Chroma store holding the SciFact corpus (5,183 documents, indexed once with
``ctxemb index`` into --store; an existing store there is reused). Three kinds of run, N each,
after one untimed warm-up (page cache, .pyc files, the ONNX export):

* ``sample0``: ``--sample 0``: the stamp, configuration and canary only (the reference);
* ``verifying``: the default open (16 stored documents re-embedded) with no verification
  record: what every open cost before records, and what the first open costs now;
* ``verified``: the default open again right after one that passed: the ids are read and
  compared with the record, no stored document is re-embedded (ctxemb_core.verified).

Queries are embedded every time (``--no-cache``). The children's ctxemb cache folder is the
benchmark's own (--cache-dir), so the records it removes before each ``verifying`` run are only
its own. Also measured in one process: what the record check reads (``get(include=[])``) against
reading every stored vector (what would be needed to see a record rewritten in place), and the
canary check that runs on every open.

Reported: the median seconds of each kind, ``verified / sample0`` of the medians (goal: at most
1.3) and the median of the per-round ratios (a round's three runs share the load of the moment).

Usage:
    .venv/bin/python benchmarks/cold_query.py [--runs 5] [--store DIR] [--cache-dir DIR]
    .venv/bin/python benchmarks/cold_query.py --quick  # 48 short documents, 1 run each, no warm-up
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_DATA,
    QUICK_HELP,
    QUICK_WORDS,
    REPO,
    cpu_label,
    machine_info,
    offline,
    quick_texts,
    share_exports,
    shown,
    write_result,
)

QUERY = "vitamin D deficiency"
COLLECTION = "scifact"
QUICK_DOCS = 48  # --quick: more than the 16 an open samples
GOAL = 1.3

# Run in a child, on the store the timed runs use: what reading costs, and the canary.
_READS = """
import json, sys, time
import chromadb
from ctxemb_core import Embedder, IndexStamp
def best(f, n=3):
    out = []
    for _ in range(n):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return round(min(out) * 1000, 1)
raw = chromadb.PersistentClient(sys.argv[1]).get_collection(sys.argv[2], embedding_function=None)
stamp = IndexStamp.from_metadata(raw.metadata)
embedder = Embedder(stamp.contract)
stamp.verify(embedder)  # warm: the network is loaded once per process anyway
print(json.dumps({
    "records": raw.count(),
    "get_ids_ms": best(lambda: raw.get(include=[])),
    "get_documents_ms": best(lambda: raw.get(include=["documents"])),
    "get_embeddings_ms": best(lambda: raw.get(include=["embeddings"])),
    "get_documents_and_embeddings_ms": best(lambda: raw.get(include=["documents", "embeddings"])),
    "canary_ms": best(lambda: stamp.verify(embedder)),
}))
"""


def _ctxemb() -> str:
    return str(Path(sys.executable).with_name("ctxemb"))


def _env(cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CTXEMB_CACHE_DIR": str(cache),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }


def _corpus(data: Path, work: Path, quick: bool) -> Path:
    """The SciFact corpus, or its first QUICK_DOCS documents in a JSONL file, texts cut short."""
    source = data / "scifact" / "corpus.jsonl.gz"
    if not source.is_file():
        raise SystemExit(f"{source} not found; pass --data pointing at the shared data folder")
    if not quick:
        return data / "scifact"
    subset = work / "scifact-quick.jsonl"
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(QUICK_DOCS), fh, strict=False)]
    for row in rows:
        row["text"] = quick_texts([row["text"]])[0]
    subset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return subset


def _index(corpus: Path, store: Path, cache: Path) -> None:
    print(f"indexing {corpus} into {store} (once; a few minutes for all of SciFact) …", flush=True)
    started = time.perf_counter()
    subprocess.run(
        [_ctxemb(), "index", str(corpus), "--collection", COLLECTION, "--path", str(store)],
        check=True,
        env=_env(cache),
        cwd=REPO,
    )
    print(f"  indexed in {time.perf_counter() - started:.0f} s", flush=True)


def _query(store: Path, cache: Path, sample: int | None) -> dict[str, Any]:
    args = [_ctxemb(), "query", QUERY, "--collection", COLLECTION, "--path", str(store)]
    args += ["--no-cache", "--json"] + ([] if sample is None else ["--sample", str(sample)])
    started = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, env=_env(cache), cwd=REPO)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"ctxemb query failed:\n{result.stderr[-3000:]}")
    top = json.loads(result.stdout.strip().splitlines()[-1])["results"][0]["id"]
    return {"seconds": seconds, "top": top, "stderr": result.stderr.strip()}


def _forget(cache: Path) -> None:
    """Remove the benchmark's verification records: the next open samples as with none."""
    shutil.rmtree(cache / "verified", ignore_errors=True)


def _reads(store: Path, cache: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", _READS, str(store), COLLECTION],
        capture_output=True,
        text=True,
        env=_env(cache),
        cwd=REPO,
        check=True,
    )
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [r["seconds"] for r in runs]
    return {
        "median_seconds": round(statistics.median(seconds), 3),
        "seconds": [round(s, 3) for s in seconds],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Writes benchmarks/results/cold_query.json (or --out). With --quick: "
        "cold_query_quick.json in a temporary folder (or --out), never benchmarks/results/; "
        "without --cache-dir the children's cache then reads the calling environment's ONNX "
        "exports.",
    )
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each (default 5)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="the embedded store to query (indexed first if it holds no collection; default: "
        "a temporary folder, removed at the end)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the children's CTXEMB_CACHE_DIR (embedding cache, ONNX export, verification "
        "records; default: a temporary folder). Reusing one makes indexing a cache read",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=QUICK_HELP.format(
            cuts=f"the first {QUICK_DOCS} documents, each text cut to its first {QUICK_WORDS} "
            "words, 1 run each, no warm-up"
        ),
    )
    parser.add_argument("--out", type=Path, default=None, help="result JSON (default results/)")
    args = parser.parse_args()
    runs = args.runs if args.runs is not None else (1 if args.quick else 5)
    if runs < 1:
        parser.error("--runs must be at least 1")
    offline()
    with tempfile.TemporaryDirectory(prefix="ctxemb-cold-query-") as tmp:
        work = Path(tmp)
        store = args.store or work / "chroma"
        cache = args.cache_dir or work / "cache"
        if args.quick and args.cache_dir is None:
            share_exports(cache)
        if not (store / "chroma.sqlite3").is_file():
            _index(_corpus(args.data, work, args.quick), store, cache)
        print(f"CPU: {cpu_label()}, load {os.getloadavg()}", flush=True)
        if not args.quick:  # a quick run's figures are not compared: no warm-up to pay for
            _query(store, cache, 0)  # warm-up: page cache, .pyc files, the ONNX export
        kinds: dict[str, list[dict[str, Any]]] = {"sample0": [], "verifying": [], "verified": []}
        for i in range(runs):
            # verifying then verified (the record the first writes); sample0 before or after.
            order = ["sample0", "verifying", "verified"]
            if i % 2:
                order = ["verifying", "verified", "sample0"]
            for kind in order:
                if kind == "verifying":
                    _forget(cache)
                r = _query(store, cache, 0 if kind == "sample0" else None)
                kinds[kind].append(r)
                print(f"  run {i + 1} {kind:<10} {r['seconds']:6.2f} s  top {r['top']}", flush=True)
        reads = _reads(store, cache)
        load = os.getloadavg()
    results = {k: _summary(v) for k, v in kinds.items()}
    base = results["sample0"]["median_seconds"]
    # Per round too: the three runs of a round share the machine's load of the moment.
    paired = {
        kind: round(
            statistics.median(
                r["seconds"] / s["seconds"]
                for r, s in zip(kinds[kind], kinds["sample0"], strict=True)
            ),
            3,
        )
        for kind in ("verified", "verifying")
    }
    ratios = {
        "verified_over_sample0": round(results["verified"]["median_seconds"] / base, 3),
        "verifying_over_sample0": round(results["verifying"]["median_seconds"] / base, 3),
        "verified_over_sample0_paired": paired["verified"],
        "verifying_over_sample0_paired": paired["verifying"],
    }
    tops = {r["top"] for v in kinds.values() for r in v}
    print()
    for kind, r in results.items():
        print(f"{kind:<10} median {r['median_seconds']:6.2f} s  {r['seconds']}")
    print(
        f"verified / sample0: {ratios['verified_over_sample0']}x (goal ≤ {GOAL}); verifying / "
        f"sample0: {ratios['verifying_over_sample0']}x; median of the rounds' ratios: "
        f"verified {paired['verified']}x, verifying {paired['verifying']}x; same top hit in "
        f"every run: {len(tops) == 1}"
    )
    print(
        f"{reads['records']} records: get(include=[]) {reads['get_ids_ms']} ms, every vector "
        f"{reads['get_embeddings_ms']} ms, vectors and texts "
        f"{reads['get_documents_and_embeddings_ms']} ms; canary {reads['canary_ms']} ms"
    )
    path = write_result(
        "cold_query_quick" if args.quick else "cold_query",
        {
            "query": QUERY,
            "documents": reads["records"],
            "quick": args.quick,
            "runs_each": runs,
            "store": shown(store) if args.store else "a temporary embedded store",
            "results": results,
            "ratios": ratios,
            "goal": {"verified_over_sample0": GOAL},
            "same_top_hit": len(tops) == 1,
            "reads_ms": reads,
            "load_average_after": [round(x, 2) for x in load],
            "machine": machine_info(),
        },
        args.out,
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
