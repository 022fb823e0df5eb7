"""SciFact through Haystack pipelines under one contract, scored against the reference.

What this shows, end to end:

1. An **indexing pipeline** (``ContractDocumentEmbedder`` → ``ContractDocumentWriter``) embeds the
   5,183 SciFact documents once with the bundled all-MiniLM-L6-v2 contract and writes them into
   Haystack's ``InMemoryDocumentStore`` (exact search) and/or ``ChromaDocumentStore`` (HNSW,
   embedded, in a temporary folder unless ``--path``). With both stores the embedder's output
   feeds both writers: the documents are embedded once.
2. A **query pipeline** per store (``ContractTextEmbedder`` → ``ContractRetriever`` around the
   store's own retriever, ``top_k=100``) runs the 300 test queries one at a time; the retrieved
   documents' scores make the run, scored with nDCG@10, recall@100 and MRR@10 by
   ``ctxemb_core.eval`` (trec_eval's definitions).
3. The figures are compared with the Chroma adapter's nDCG@10 on the same data (``ctxemb eval``,
   0.64508, also MTEB's published figure): the in-memory store must be within 0.002, Chroma's
   approximate search within 0.005.
4. A query pipeline built from **another contract** (the same model with CLS pooling) is refused
   by ``ContractRetriever`` before any document leaves the store; Haystack wraps the ctxemb
   error in a ``PipelineRuntimeError``.

Documents are exactly those of ``ctxemb eval``: id = the corpus ``_id``, text =
``document_text(doc)`` (BEIR's ``title + " " + text``, stripped), so the figures are comparable.

Run (from the repository root)::

    .venv/bin/python examples/haystack_retrieval.py                    # both stores
    .venv/bin/python examples/haystack_retrieval.py --store memory --check

Embedding the corpus takes two to five minutes on two CPU cores, depending on their load; the
300 queries take about 35 s on the in-memory store (it scores every stored vector on each query)
and 10 s on Chroma. ``--check`` exits 1 when a store is outside its tolerance.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before Haystack is imported: no usage telemetry and no model hub from an example.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
from haystack.core.errors import PipelineRuntimeError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy

from ctxemb_core import EmbeddingContract, contract_for
from ctxemb_core.errors import TruncationWarning
from ctxemb_core.eval import BeirDataset, document_text, evaluate, load_beir
from ctxemb_haystack import (
    ContractDocumentEmbedder,
    ContractDocumentWriter,
    ContractRetriever,
    ContractTextEmbedder,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TOP_K = 100
#: nDCG@10 of the Chroma adapter (``ctxemb eval`` on SciFact), equal to MTEB's published figure.
REFERENCE_NDCG = 0.64508
#: How far each store may be from the reference: exact search, then HNSW's approximate search.
TOLERANCE = {"memory": 0.002, "chroma": 0.005}
STORES = tuple(TOLERANCE)


@dataclass(frozen=True)
class StoreResult:
    """One store's figures."""

    store: str
    metrics: dict[str, float]
    query_seconds: float
    queries: int

    @property
    def ndcg(self) -> float:
        return self.metrics["ndcg@10"]

    @property
    def ok(self) -> bool:
        return abs(self.ndcg - REFERENCE_NDCG) <= TOLERANCE[self.store]


def load_scifact(data: Path) -> BeirDataset:
    """SciFact's corpus, test queries and judgements from the shared data folder."""
    return load_beir(data / "scifact", split="test")


def to_documents(dataset: BeirDataset) -> list[Document]:
    """Haystack documents with the ids and texts ``ctxemb eval`` indexes."""
    return [
        Document(id=doc_id, content=document_text(doc)) for doc_id, doc in dataset.corpus.items()
    ]


@contextmanager
def open_stores(kinds: tuple[str, ...], path: Path | None = None) -> Iterator[dict[str, Any]]:
    """The document stores to evaluate; Chroma's lives in ``path`` or a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="ctxemb-haystack-") as tmp:
        stores: dict[str, Any] = {}
        if "memory" in kinds:
            stores["memory"] = InMemoryDocumentStore()
        if "chroma" in kinds:
            from haystack_integrations.document_stores.chroma import ChromaDocumentStore

            # The first guarded write creates the collection, stamped, in the space the contract
            # calls for (cosine for normalised vectors), so no distance_function is passed here;
            # the store then logs that the collection exists and its own settings are ignored.
            stores["chroma"] = ChromaDocumentStore(
                collection_name="scifact", persist_path=str(path or tmp)
            )
        yield stores


def indexing_pipeline(contract: EmbeddingContract, stores: Mapping[str, Any]) -> Pipeline:
    """One embedder feeding a guarded writer per store, so each document is embedded once."""
    pipeline = Pipeline()
    pipeline.add_component("embedder", ContractDocumentEmbedder(contract=contract))
    for name, store in stores.items():
        # SKIP: a persistent Chroma folder indexed before (--path) only gains what it lacks.
        pipeline.add_component(
            f"writer_{name}", ContractDocumentWriter(store, DuplicatePolicy.SKIP)
        )
        pipeline.connect("embedder.documents", f"writer_{name}.documents")
    return pipeline


def query_pipeline(contract: EmbeddingContract, store: Any, top_k: int = TOP_K) -> Pipeline:
    """Query embedder → guarded retriever; the fingerprint travels beside the embedding."""
    if isinstance(store, InMemoryDocumentStore):
        retriever: Any = InMemoryEmbeddingRetriever(store, top_k=top_k)
    else:
        from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever

        retriever = ChromaEmbeddingRetriever(store, top_k=top_k)
    pipeline = Pipeline()
    pipeline.add_component("embedder", ContractTextEmbedder(contract=contract))
    pipeline.add_component("retriever", ContractRetriever(retriever))
    pipeline.connect("embedder.embedding", "retriever.query_embedding")
    pipeline.connect("embedder.fingerprint", "retriever.fingerprint")
    return pipeline


def index(
    contract: EmbeddingContract, stores: Mapping[str, Any], documents: list[Document]
) -> dict[str, int]:
    """Embed and write the documents into every store; returns the documents written per store."""
    pipeline = indexing_pipeline(contract, stores)
    out = pipeline.run({"embedder": {"documents": documents}})
    return {name: out[f"writer_{name}"]["documents_written"] for name in stores}


def search(pipeline: Pipeline, queries: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Run each query through the pipeline; the run maps query ids to ``{doc_id: score}``."""
    run: dict[str, dict[str, float]] = {}
    for qid, text in queries.items():
        found = pipeline.run({"embedder": {"text": text}})["retriever"]["documents"]
        # The retriever's score is a similarity (higher is better), as trec_eval ranks.
        run[qid] = {doc.id: float(doc.score) for doc in found}
    return run


def evaluate_store(
    contract: EmbeddingContract, name: str, store: Any, dataset: BeirDataset
) -> StoreResult:
    """nDCG@10, recall@100 and MRR@10 of one store through a query pipeline."""
    pipeline = query_pipeline(contract, store)
    pipeline.warm_up()  # the model loads here, not inside the first timed query
    start = time.perf_counter()
    run = search(pipeline, dataset.queries)
    seconds = time.perf_counter() - start
    metrics = evaluate(run, dataset.qrels, ks=(10, 100))
    return StoreResult(name, metrics, seconds, len(dataset.queries))


def refusal(contract: EmbeddingContract, store: Any, query: str) -> BaseException:
    """The error a query pipeline of another contract meets on this store (raised inside the
    retriever, wrapped by Haystack)."""
    pipeline = query_pipeline(contract, store, top_k=3)
    try:
        pipeline.run({"embedder": {"text": query}})
    except PipelineRuntimeError as err:
        return err.__cause__ or err
    raise AssertionError(f"a query under {contract.describe()} was not refused")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--store", choices=(*STORES, "both"), default="both")
    parser.add_argument("--path", type=Path, help="Chroma's folder (default: a temporary one)")
    parser.add_argument("--check", action="store_true", help="exit 1 outside the tolerances")
    args = parser.parse_args(argv)
    # SciFact abstracts often exceed the model's 256 tokens: truncation is expected here.
    warnings.filterwarnings("ignore", category=TruncationWarning)

    dataset = load_scifact(args.data)
    contract = contract_for(MODEL)
    kinds = STORES if args.store == "both" else (args.store,)
    print(f"contract {contract.describe()}")
    print(f"SciFact: {len(dataset.corpus)} documents, {len(dataset.queries)} test queries")

    with open_stores(kinds, args.path) as stores:
        start = time.perf_counter()
        written = index(contract, stores, to_documents(dataset))
        index_seconds = time.perf_counter() - start
        print(f"indexed in {index_seconds:.1f} s: {written} documents written")

        results = [evaluate_store(contract, name, store, dataset) for name, store in stores.items()]

        # The same model with another pooling is another contract: its vectors are not comparable.
        other = contract.with_(pooling="cls")
        print(f"\na query pipeline under another contract ({other.describe()}):")
        for name, store in stores.items():
            err = refusal(other, store, next(iter(dataset.queries.values())))
            print(f"--- {name}: PipelineRuntimeError caused by {type(err).__name__}:\n{err}")

    print_table(results, index_seconds, len(stores))
    if args.check and not all(r.ok for r in results):
        return 1
    return 0


def print_table(results: list[StoreResult], index_seconds: float, n_stores: int) -> None:
    """The final figures, one row per store."""
    print(f"\nSciFact test, top_k={TOP_K}, reference nDCG@10 {REFERENCE_NDCG} (Chroma adapter)")
    columns = ("store", "nDCG@10", "diff", "tol", "recall@100", "MRR@10", "queries s", "result")
    print("  ".join(f"{c:>10}" for c in columns))
    for r in results:
        row = (
            r.store,
            f"{r.ndcg:.5f}",
            f"{r.ndcg - REFERENCE_NDCG:+.5f}",
            f"{TOLERANCE[r.store]:.3f}",
            f"{r.metrics['recall@100']:.5f}",
            f"{r.metrics['mrr@10']:.5f}",
            f"{r.query_seconds:.1f}",
            "PASS" if r.ok else "FAIL",
        )
        print("  ".join(f"{c:>10}" for c in row))
    per_query = ", ".join(f"{r.store} {1000 * r.query_seconds / r.queries:.1f}" for r in results)
    print(f"indexing: {index_seconds:.1f} s (embedded once for {n_stores} store(s))")
    print(f"queries: one at a time through the pipeline, ms per query: {per_query}")
    print("another contract (pooling=cls): refused by every store")


if __name__ == "__main__":
    raise SystemExit(main())
