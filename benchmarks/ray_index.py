"""Indexing SciFact into a Chroma server: Ray actors against the single-process ``ctxemb index``.

One Chroma server and one local Ray instance (``--cpus`` CPUs), both on 127.0.0.1. The same
documents are indexed, from a JSONL corpus, into a fresh collection each time: by the
single-process path (``ctxemb index --host``), then by ``ctxemb index --ray`` with 1 and with 2
actors. Each time is the whole command (model load and, for Ray, actor start-up included), with
the embedding cache off. Then Chroma's insert rate alone: the single-process collection's
vectors, precomputed, added to a new collection over HTTP in batches of ``--batch``. Finally the
2-actor collection is compared with the single-process one: same ids, minimum cosine.

With the whole corpus (``--n 5183``), ``ctxemb eval`` then searches the 2-actor collection as it
stands (it adds only ids it lacks) and its nDCG@10 is recorded.

Run:  flock /tmp/ctxemb-bench.lock .venv/bin/python benchmarks/ray_index.py --n 5183
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# Before ray is imported: keep it on 127.0.0.1 and report no usage.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    add_quick,
    command_line,
    machine_info,
    offline,
    quick_texts,
    write_result,
    writes,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(folder: Path) -> Iterator[int]:
    import chromadb

    port = _free_port()
    chroma = Path(sys.executable).with_name("chroma")
    cmd = [str(chroma), "run", "--path", str(folder), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _corpus(data: Path, n: int, out: Path, quick: bool) -> int:
    from ctxemb_core.eval.beir import load_jsonl_corpus

    corpus = load_jsonl_corpus(data / "scifact" / "corpus.jsonl.gz")
    ids = list(corpus)[:n]
    with out.open("w", encoding="utf-8") as f:
        for i in ids:
            doc = corpus[i]
            if quick:
                doc = {**doc, "text": quick_texts([doc["text"]])[0]}
            f.write(json.dumps({"_id": i, **doc}) + "\n")
    return len(ids)


def _all_ids(data: Path) -> list[str]:
    from ctxemb_core.eval.beir import load_jsonl_corpus

    return list(load_jsonl_corpus(data / "scifact" / "corpus.jsonl.gz"))


def _eval_ray2(data: Path, port: int) -> dict[str, object]:
    """``ctxemb eval`` on the 2-actor collection (it adds only ids it lacks: none)."""
    from ctxemb_core.cli import main

    args = ["eval", "--via", "chroma", "--host", "127.0.0.1", "--port", str(port)]
    args += ["--collection", "ray2", "--data", str(data / "scifact"), "--model", MODEL]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([*args, "--no-cache"])
    if code != 0:
        raise SystemExit(f"ctxemb {' '.join(args)} exited {code}")
    row = json.loads(out.getvalue().strip().splitlines()[-1])
    return {
        "command": "ctxemb " + " ".join(args),
        "ndcg@10": row["ndcg@10"],
        "indexed_now": row["indexed_now"],
    }


def _timed_cli(args: list[str]) -> float:
    from ctxemb_core.cli import main

    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"ctxemb {' '.join(args)} exited {code}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("ray_index")
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=1000, help="documents to index")
    parser.add_argument("--batch", type=int, default=64, help="documents per batch / write")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"16 documents, each text cut to its first {QUICK_WORDS} words, in batches of 8, the "
        "2-actor run only",
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.batch = 16, 8
    offline()

    import chromadb
    import numpy as np
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        n = _corpus(args.data, args.n, corpus, args.quick)
        with _server(Path(tmp) / "chroma") as port:
            store = ["--host", "127.0.0.1", "--port", str(port), "--no-cache"]
            common = [str(corpus), *store, "--model", MODEL, "--batch-size", str(args.batch)]
            runs: dict[str, float] = {}
            runs["single_process"] = _timed_cli(["index", *common, "--collection", "single"])
            print(f"single process: {n / runs['single_process']:.1f} docs/s")
            ray.init(
                num_cpus=args.cpus,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",
            )
            try:
                # A quick run indexes with the 2 actors it compares with the single process.
                for actors in (2,) if args.quick else (1, 2):
                    name = f"ray{actors}"
                    runs[name] = _timed_cli(
                        ["index", *common, "--ray", "--actors", str(actors), "--collection", name]
                    )
                    print(f"ray, {actors} actor(s): {n / runs[name]:.1f} docs/s")
            finally:
                ray.shutdown()
            client = chromadb.HttpClient(host="127.0.0.1", port=port)
            single = client.get_collection("single", embedding_function=None).get(
                include=["embeddings", "documents"]
            )
            ray2 = client.get_collection("ray2", embedding_function=None).get(
                include=["embeddings"]
            )
            a = dict(zip(single["ids"], np.asarray(single["embeddings"]), strict=True))
            b = dict(zip(ray2["ids"], np.asarray(ray2["embeddings"]), strict=True))
            same_ids = set(a) == set(b)
            ids = sorted(a)
            x = np.stack([a[i] for i in ids])
            y = np.stack([b[i] for i in ids]) if same_ids else x
            cos = (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
            raw = client.create_collection("insert_only", embedding_function=None)
            start = time.perf_counter()
            for k in range(0, len(single["ids"]), args.batch):
                raw.add(
                    ids=single["ids"][k : k + args.batch],
                    embeddings=single["embeddings"][k : k + args.batch],
                    documents=single["documents"][k : k + args.batch],
                )
            insert = time.perf_counter() - start
            print(f"chroma insert alone (precomputed vectors): {n / insert:.1f} docs/s")
            print(f"ray2 vs single process: same ids {same_ids}, min cosine {cos.min():.7f}")
            evaluated = _eval_ray2(args.data, port) if n == len(_all_ids(args.data)) else None
            if evaluated is not None:
                print(
                    f"ctxemb eval on the ray2 collection: nDCG@10 {evaluated['ndcg@10']}, "
                    f"{evaluated['indexed_now']} documents added"
                )
    result = {
        "documents": n,
        "batch": args.batch,
        "ray_cpus": args.cpus,
        "seconds": {k: round(v, 2) for k, v in runs.items()},
        "docs_per_s": {k: round(n / v, 1) for k, v in runs.items()},
        "chroma_insert_docs_per_s": round(n / insert, 1),
        "ray2_same_ids": same_ids,
        "ray2_min_cosine": float(cos.min()),
        # The whole corpus only: `ctxemb eval` searching the 2-actor collection as it stands.
        "ray2_eval": evaluated,
        "note": "whole commands (model load, actor start-up included), embedding cache off; "
        "Chroma server and Ray on the same machine",
        "machine": machine_info(),
    }
    path = write_result("ray_index", result, args.out, quick=args.quick)
    print(f"wrote {path}\nreproduce: {command_line()}")


if __name__ == "__main__":
    main()
