"""The failure-mode gallery: each vector failure of the seed's table, measured, then refused.

The seed reference ("Contextual embeddings", section "Failure modes") lists what goes wrong when
the parts of an embedding recipe drift apart. For each row that concerns vectors this script
shows the damage *without* ctxemb (vectors written and searched with raw numpy, a raw
``chromadb`` collection, a plain ``langchain_chroma.Chroma`` or Haystack's own writer and
``InMemoryDocumentStore``) on BEIR SciFact with the bundled all-MiniLM-L6-v2, and the typed
error ctxemb raises *instead* (entry 9's row is this gallery's addition to the seed's table):

1. CLS vs mean pooling, on both sides and on the query side only.
2. Vectors left un-normalised: cosine and inner-product search rank differently.
3. A missing instruction prefix: on a tiny E5-style model built here, and as a query-side
   change on MiniLM.
4. Mixed encoders in one index: part of the corpus written by another encoder of the same
   width (a random 384-wide BERT built here), which raw Chroma accepts silently.
5. A pooled text vector read as a token vector ("bank" in two sentences).
6. Matryoshka truncation to 128 of 384 dimensions, with and without re-normalisation.
7. A LangChain ``Chroma`` store opened with the wrong embeddings.
8. BM25 queried with another analyzer than the index's.
9. Stock deduplication after a model change: LangChain's ``index()`` with a record manager,
   Haystack's ``DuplicatePolicy.SKIP`` and LlamaIndex's ``IngestionPipeline`` key on the text,
   skip every document and leave the old vectors to the new queries; ctxemb refuses the
   re-index, its LlamaIndex pipeline re-embeds under a new contract, and an upgrade
   (``plan_upgrade``, ``begin_upgrade`` + ``backfill``) re-embeds every text.

It prints one block per entry (the seed's row, the measured damage, the error and the first
line of its message), a summary table, and saves a chart of SciFact nDCG@10 per wrong contract
beside the right one. Vectors come from :class:`ctxemb_core.Embedder` with an
:class:`~ctxemb_core.cache.EmbeddingCache`, so a second run is fast.

Run (from the repository root)::

    .venv/bin/python examples/failure_modes.py                      # all 5,183 documents
    .venv/bin/python examples/failure_modes.py --docs 600           # judged docs + corpus head
    .venv/bin/python examples/failure_modes.py --json gallery.json  # every figure as JSON

Needs the ``chroma``, ``langchain``, ``haystack``, ``llamaindex`` and ``eval`` extras and
``../shared/data/scifact``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub from an example
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from ctxemb_core import Embedder, EmbeddingContract, contract_for
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.errors import CtxembError, TruncationWarning
from ctxemb_core.eval import build_run, document_text, evaluate, load_beir, search_topk

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "scifact"
K = 10
TRUNCATE = 128
#: Documents of the small stamped index that entry 9 upgrades for real.
DEDUP_SLICE = 16

#: The rows of the seed's failure-mode table that concern vectors: (symptom, cause, fix).
SEED_ROWS = {
    "pooling": (
        'Two "BERT embeddings" are wildly dissimilar',
        "different pooling (CLS vs mean), or one side normalised and the other not",
        "pin (model, pooling, normalisation) for both sides, then re-embed",
    ),
    "encoders": (
        "A query scores well against documents it should not match",
        "query and corpus vectors came from different encoders, or one side omitted the "
        "instruction prefix",
        "never mix encoders in one index; apply the prefix the model was trained with",
    ),
    "normalize": (
        "Cosine and dot-product search return different neighbours",
        "the vectors were not L2-normalised",
        "normalise at index time and at query time",
    ),
    "lexical": (
        "Keyword (BM25) or hybrid results get worse after a change nobody connected to search",
        "the query side analyses text with another recipe than the index (stemmer, stop words, "
        "lower-casing): BM25 must be configured identically at indexing and retrieval time",
        "pin the lexical recipe with the index and refuse a query under another",
    ),
    # Not a row of the seed's table: this gallery's addition (issue 45), in the table's style.
    "dedup": (
        "Re-indexing after a model change reports every document unchanged, and search gets worse",
        "the framework's deduplication keys on the text alone (a content hash), not on the "
        "recipe that embedded it: the old vectors stay and are searched with the new queries",
        "key stored vectors on the contract too: re-embed everything into an index stamped "
        "with the new contract",
    ),
    "unit": (
        'A word\'s "vector" looks like a sentence summary',
        "a pooled text vector was read as a token vector",
        "check the unit: token vectors come from the encoder, text vectors from pooling",
    ),
}


# -- what one entry reports --------------------------------------------------------------------


@dataclass
class Refusal:
    """The typed error ctxemb raised where the raw path went ahead."""

    call: str
    error: str
    message: str
    #: The differing fields as the message names them (``pooling: index='mean', …``).
    detail: list[str] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)
    kind: str | None = None


@dataclass
class Entry:
    """One row of the gallery: the seed's row, what was measured and what ctxemb refused."""

    key: str
    title: str
    seed: str
    #: nDCG@10 of each wrong recipe (label -> figure), charted beside the right contract.
    ndcg: dict[str, float] = field(default_factory=dict)
    #: Labels of ``ndcg`` that are a contract of their own (right on an index written under it).
    own_contract: list[str] = field(default_factory=list)
    #: The right contract's figure through the same search path, where it is not exact numpy.
    reference: dict[str, float] = field(default_factory=dict)
    #: Other measurements (rank changes, cosines).
    measures: dict[str, Any] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: What ``ndcg`` is compared with, where it is not the dense right contract (BM25's own).
    compare: float | None = None


def refused(call: str, action: Callable[[], Any]) -> Refusal:
    """Run ``action``, which ctxemb should refuse, and record the error it raised."""
    try:
        action()
    except CtxembError as exc:
        diff = getattr(exc, "diff", None)
        lines = str(exc).splitlines()
        return Refusal(
            call=call,
            error=type(exc).__name__,
            message=lines[0],
            detail=[line.strip() for line in lines[1:] if line.startswith("  ")],
            fields=list(getattr(exc, "fields", ()) or ()),
            kind=None if diff is None else diff.kind.value,
        )
    return Refusal(call=call, error="(none: not refused)", message="")


# -- data and vectors --------------------------------------------------------------------------


@dataclass
class SciFact:
    ids: list[str]
    texts: list[str]
    qids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]


def load_scifact(folder: Path, docs: int | None) -> SciFact:
    """SciFact's test split; with ``docs``, every judged document plus the corpus head."""
    data = load_beir(folder, "test")
    ids = list(data.corpus)
    if docs is not None:
        judged = {d for judged in data.qrels.values() for d in judged}
        keep = [i for i in ids if i in judged]
        head = iter(i for i in ids if i not in judged)
        while len(keep) < docs and (nxt := next(head, None)) is not None:
            keep.append(nxt)
        ids = keep
    qids = list(data.queries)
    return SciFact(
        ids=ids,
        texts=[document_text(data.corpus[i]) for i in ids],
        qids=qids,
        queries=[data.queries[q] for q in qids],
        qrels=data.qrels,
    )


class Vectors:
    """Embedders built once per contract, all reading and writing one embedding cache."""

    def __init__(self, cache: EmbeddingCache) -> None:
        self.cache = cache
        self._embedders: dict[str, Embedder] = {}

    def embedder(self, contract: EmbeddingContract) -> Embedder:
        if contract.fingerprint not in self._embedders:
            self._embedders[contract.fingerprint] = Embedder(contract, cache=self.cache)
        return self._embedders[contract.fingerprint]

    def documents(self, contract: EmbeddingContract, texts: Sequence[str]) -> np.ndarray:
        return self.embedder(contract).embed_documents(list(texts))

    def queries(self, contract: EmbeddingContract, texts: Sequence[str]) -> np.ndarray:
        return self.embedder(contract).embed_queries(list(texts))


def to_unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(to_unit(a) @ to_unit(b))


@dataclass
class Search:
    """An exact inner-product search of every query: its top 10 and its nDCG@10."""

    top: np.ndarray
    ndcg: float


def search(data: SciFact, queries: np.ndarray, documents: np.ndarray) -> Search:
    """Exact maximum-inner-product search in numpy (what a raw numpy index does)."""
    indices, scores = search_topk(queries, documents, K)
    run = build_run(data.qids, data.ids, indices, scores)
    return Search(top=indices, ndcg=evaluate(run, data.qrels, ks=(K,))[f"ndcg@{K}"])


def rank_change(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """How two searches' top-10 lists differ: queries changed, shared results, same first hit."""
    pairs = list(zip(a.tolist(), b.tolist(), strict=True))
    shared = [len(set(x) & set(y)) for x, y in pairs]
    return {
        "queries": len(a),
        "top10_order_changed": sum(x != y for x, y in pairs),
        "top10_set_changed": sum(n < a.shape[1] for n in shared),
        "mean_top10_overlap": round(float(np.mean(shared)) / a.shape[1], 4),
        "first_hit_changed": int((a[:, 0] != b[:, 0]).sum()),
    }


def _relevant_hits(data: SciFact, run: dict[str, dict[str, float]], among: set[str]) -> int:
    """How many (query, relevant document among ``among``) pairs the run's top 10 holds."""
    return sum(
        1
        for qid, hits in run.items()
        for d in hits
        if d in among and data.qrels.get(qid, {}).get(d, 0) > 0
    )


def run_ndcg(data: SciFact, run: dict[str, dict[str, float]]) -> float:
    return evaluate(run, data.qrels, ks=(K,))[f"ndcg@{K}"]


@contextmanager
def logged(name: str) -> Iterator[list[str]]:
    """The messages logger ``name`` emits inside the block, kept instead of printed."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger, keep = logging.getLogger(name), Keep()
    propagate = logger.propagate
    logger.addHandler(keep)
    logger.propagate = False
    try:
        yield said
    finally:
        logger.removeHandler(keep)
        logger.propagate = propagate


# -- tiny models built in code -----------------------------------------------------------------

_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789")
_PUNCT = list(".,;:!?'\"()[]{}-_/\\%&+=<>*")


def build_tiny_bert(
    folder: Path, texts: Sequence[str], *, hidden: int, layers: int = 2, seed: int = 0
) -> Path:
    """A randomly initialised ``BertModel`` folder with a WordPiece tokenizer.

    The vocabulary is the 3,000 most frequent words of ``texts`` plus single characters (as
    word starts and ``##`` continuations), so any ASCII word splits into known pieces. The
    weights are seeded, so the same texts give the same folder and the same weights digest.
    """
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    counts = Counter(w for t in texts for w in re.findall(r"[a-z]+", t.lower()))
    words = [w for w, _ in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))][:3000]
    vocab = list(dict.fromkeys(_SPECIALS + _PUNCT + _CHARS + words + [f"##{c}" for c in _CHARS]))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(f"{t}\n" for t in vocab), encoding="utf-8")
    tokenizer = BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = 256
    tokenizer.save_pretrained(str(folder))
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        BertModel(config).save_pretrained(str(folder))
    return folder


# -- Chroma ------------------------------------------------------------------------------------


def raw_collection(client: Any, ids: list[str], texts: list[str], vectors: np.ndarray) -> Any:
    """A raw chromadb collection holding the given vectors: no stamp, no check.

    Cosine space and ``ef_search=200``, as the collections ctxemb creates, so that the
    approximate search costs the right contract well under 0.01 nDCG@10.
    """
    collection = client.create_collection(
        f"raw-{uuid.uuid4().hex[:8]}",
        embedding_function=None,
        configuration={"hnsw": {"space": "cosine", "ef_search": 200}},
    )
    step = client.get_max_batch_size()
    for s in range(0, len(ids), step):
        collection.add(
            ids=ids[s : s + step],
            embeddings=vectors[s : s + step],
            documents=texts[s : s + step],
        )
    return collection


def chroma_run(data: SciFact, collection: Any, queries: np.ndarray) -> dict[str, dict[str, float]]:
    """The top 10 of each query from a raw collection, cosine distances turned into scores."""
    found = collection.query(query_embeddings=queries, n_results=K, include=["distances"])
    return {
        qid: {d: 1.0 - float(dist) for d, dist in zip(ids, dists, strict=True)}
        for qid, ids, dists in zip(data.qids, found["ids"], found["distances"], strict=True)
    }


# -- the gallery -------------------------------------------------------------------------------


class Gallery:
    """Every entry, sharing the vectors, the stamped collection and the Chroma client."""

    def __init__(self, data: SciFact, workdir: Path, cache: EmbeddingCache) -> None:
        import chromadb
        from chromadb.config import Settings

        from ctxemb_chroma import open_collection

        self.data = data
        self.workdir = workdir
        #: How long the right contract's vectors and the stamped index took.
        self.seconds = 0.0
        self.vectors = Vectors(cache)
        #: Per wrong recipe derived from one token pass, its largest gap to its own Embedder.
        self.gaps: dict[str, float] = {}
        self.right = contract_for(MODEL)
        self.client = chromadb.PersistentClient(
            path=str(workdir / "chroma"), settings=Settings(anonymized_telemetry=False)
        )
        self.docs = {"right": self.vectors.documents(self.right, data.texts)}
        self.queries = {"right": self.vectors.queries(self.right, data.queries)}
        self.reference = search(data, self.queries["right"], self.docs["right"])
        # The index every refusal is tried on: written under the right contract, stamped.
        self.stamped_name = "scifact"
        guarded = open_collection(self.client, self.stamped_name, self.vectors.embedder(self.right))
        step = self.client.get_max_batch_size()
        for s in range(0, len(data.ids), step):
            guarded.add_embedded(
                data.ids[s : s + step],
                self.docs["right"][s : s + step],
                data.texts[s : s + step],
                fingerprint=self.right.fingerprint,
            )
        self.guarded = guarded

    def open_as(self, contract: EmbeddingContract) -> Any:
        """Open the stamped index under another contract (what ctxemb refuses)."""
        from ctxemb_chroma import open_collection

        return open_collection(self.client, self.stamped_name, self.vectors.embedder(contract))

    def query_as(self, contract: EmbeddingContract) -> Any:
        """Query the stamped index with another contract's embedder (what ctxemb refuses)."""
        return self.guarded.query(self.data.queries[:1], embedder=self.vectors.embedder(contract))

    def document_poolings(self) -> None:
        """The documents' mean-pooled vectors before normalisation and their CLS vectors, from one
        pass of the encoder: both poolings read the same token vectors (special tokens kept, as
        the pooling layer sees them), so the corpus is embedded once for entries 1, 2 and 6, not
        once per wrong recipe. The proof: each wrong contract's own Embedder gives the same
        vectors for the first documents (``max_abs_gap_to_embedder``)."""
        if "raw" in self.docs:
            return
        raw, cls = self.right.with_(normalize=False), self.right.with_(pooling="cls")
        tokens = self.vectors.embedder(raw).embed_token_batch(self.data.texts, keep_special=True)
        self.docs["raw"] = np.stack([t.vectors.mean(axis=0) for t in tokens]).astype(np.float32)
        self.docs["cls"] = to_unit(np.stack([t.vectors[0] for t in tokens])).astype(np.float32)
        first = self.data.texts[:8]
        self.gaps = {
            name: float(np.abs(self.vectors.documents(c, first) - self.docs[name][:8]).max())
            for name, c in (("raw", raw), ("cls", cls))
        }

    def unnormalised(self) -> tuple[np.ndarray, np.ndarray]:
        """The queries' and documents' pooled vectors before normalisation (embedded once)."""
        if "raw" not in self.queries:
            self.document_poolings()
            raw = self.right.with_(normalize=False)
            self.queries["raw"] = self.vectors.queries(raw, self.data.queries)
        return self.queries["raw"], self.docs["raw"]

    # -- 1 -------------------------------------------------------------------------------------

    def pooling(self) -> Entry:
        data, right = self.data, self.right
        cls = right.with_(pooling="cls")
        self.document_poolings()
        d_cls = self.docs["cls"]
        q_cls = self.vectors.queries(cls, data.queries)
        both = search(data, q_cls, d_cls)
        one_side = search(data, q_cls, self.docs["right"])
        entry = Entry("pooling", "CLS vs mean pooling", "pooling")
        entry.ndcg["CLS pooling, both sides"] = both.ndcg
        entry.ndcg["CLS queries, mean documents"] = one_side.ndcg
        entry.measures["one_side_vs_right"] = rank_change(self.reference.top, one_side.top)
        entry.measures["cosine_mean_vs_cls_documents"] = round(
            float(np.mean(np.sum(self.docs["right"] * d_cls, axis=1))), 4
        )
        entry.measures["max_abs_gap_to_embedder"] = self.gaps["cls"]
        entry.refusals.append(
            refused("open_collection(index, cls contract)", lambda: self.open_as(cls))
        )
        entry.refusals.append(
            refused("GuardedCollection.query(..., embedder=cls)", lambda: self.query_as(cls))
        )
        return entry

    # -- 2 -------------------------------------------------------------------------------------

    def normalize(self) -> Entry:
        data, right = self.data, self.right
        raw = right.with_(normalize=False)
        q_raw, d_raw = self.unnormalised()
        by_cosine = search(data, to_unit(q_raw), to_unit(d_raw))
        by_dot = search(data, q_raw, d_raw)
        entry = Entry("normalize", "Normalised vs not: cosine vs inner product", "normalize")
        entry.ndcg["not normalised, inner product"] = by_dot.ndcg
        entry.measures["ndcg_cosine"] = by_cosine.ndcg
        entry.measures["ndcg_inner_product"] = by_dot.ndcg
        entry.measures["cosine_vs_inner_product"] = rank_change(by_cosine.top, by_dot.top)
        entry.measures["max_abs_gap_to_embedder"] = self.gaps["raw"]
        norms = np.linalg.norm(d_raw, axis=1)
        entry.measures["document_norms"] = {
            "min": round(float(norms.min()), 3),
            "median": round(float(np.median(norms)), 3),
            "max": round(float(norms.max()), 3),
        }
        entry.refusals.append(
            refused("open_collection(index, normalize=False)", lambda: self.open_as(raw))
        )
        return entry

    # -- 3 -------------------------------------------------------------------------------------

    def prefix(self) -> Entry:
        from ctxemb_chroma import open_collection

        data, right = self.data, self.right
        entry = Entry("prefix", "A missing instruction prefix", "encoders")
        # (a) an E5-style model: documents read "passage: ...", queries should read "query: ...".
        folder = build_tiny_bert(self.workdir / "tiny-e5", data.texts + data.queries, hidden=64)
        e5 = contract_for(folder, family="e5", pooling="mean", name="tiny-e5")
        bare = e5.with_(query_prefix="")
        d_e5 = self.vectors.documents(e5, data.texts)
        with_prefix = search(data, self.vectors.queries(e5, data.queries), d_e5)
        without = search(data, self.vectors.queries(bare, data.queries), d_e5)
        entry.measures["tiny_e5"] = {
            "contract": e5.describe(),
            **rank_change(with_prefix.top, without.top),
            "ndcg_with_prefix": with_prefix.ndcg,
            "ndcg_without_prefix": without.ndcg,
        }
        entry.notes.append(
            "tiny-e5 has random weights: its nDCG means nothing, the rank change is the measure"
        )
        # The same omission against an index stamped under the E5-style contract: refused.
        e5_index = open_collection(self.client, "tiny-e5", self.vectors.embedder(e5))
        head = slice(0, 32)
        e5_index.add_embedded(
            data.ids[head], d_e5[head], data.texts[head], fingerprint=e5.fingerprint
        )
        entry.refusals.append(
            refused(
                'GuardedCollection.query(..., embedder=tiny-e5 without "query: ")',
                lambda: e5_index.query(data.queries[:1], embedder=self.vectors.embedder(bare)),
            )
        )
        # (b) MiniLM was trained without prefixes: a "query: " added on the query side only.
        prefixed = right.with_(query_prefix="query: ")
        found = search(data, self.vectors.queries(prefixed, data.queries), self.docs["right"])
        entry.ndcg['MiniLM queries with "query: "'] = found.ndcg
        moved = entry.measures["minilm_query_prefix"] = rank_change(self.reference.top, found.top)
        entry.notes.append(
            f'"query: " on MiniLM changes {moved["top10_set_changed"]} of {moved["queries"]} '
            f"top-10 sets and nDCG@10 by {found.ndcg - self.reference.ndcg:+.4f}: a query-side "
            "change gives another ranking, not always a worse one; the index's stamp says which "
            "queries its vectors were made for"
        )
        entry.refusals.append(
            refused(
                'GuardedCollection.query(..., embedder="query: " prefix)',
                lambda: self.query_as(prefixed),
            )
        )
        return entry

    # -- 4 -------------------------------------------------------------------------------------

    def encoders(self) -> Entry:
        data = self.data
        folder = build_tiny_bert(self.workdir / "tiny-bert-384", data.texts, hidden=384, seed=1)
        other = contract_for(folder, pooling="mean", name="tiny-bert-384")
        # Every second document written by the other encoder: same width, so raw Chroma takes it.
        foreign = np.arange(len(data.ids)) % 2 == 1
        mixed = self.docs["right"].copy()
        mixed[foreign] = self.vectors.documents(
            other, [t for t, f in zip(data.texts, foreign, strict=True) if f]
        )
        q = self.queries["right"]
        clean = raw_collection(self.client, data.ids, data.texts, self.docs["right"])
        dirty = raw_collection(self.client, data.ids, data.texts, mixed)
        clean_run = chroma_run(data, clean, q)
        dirty_run = chroma_run(data, dirty, q)
        foreign_ids = {i for i, f in zip(data.ids, foreign, strict=True) if f}
        slots = [d for hits in dirty_run.values() for d in hits]
        entry = Entry("encoders", "Mixed encoders in one index", "encoders")
        entry.ndcg["raw Chroma, half the index by another encoder"] = run_ndcg(data, dirty_run)
        entry.reference["raw Chroma, right contract"] = run_ndcg(data, clean_run)
        entry.measures["foreign_share_of_index"] = round(float(foreign.mean()), 3)
        entry.measures["foreign_share_of_top10"] = round(
            sum(d in foreign_ids for d in slots) / max(1, len(slots)), 3
        )
        entry.measures["raw_chroma_accepted"] = dirty.count()
        # Where the damage is: the relevant documents the other encoder wrote drop out of reach.
        entry.measures["foreign_relevant_hits_in_top10"] = {
            "right index": _relevant_hits(data, clean_run, foreign_ids),
            "mixed index": _relevant_hits(data, dirty_run, foreign_ids),
        }
        entry.notes.append(
            "the other encoder is untrained, so its vectors seldom reach a top 10; a trained one "
            "would also push wrong documents up (the seed's symptom)"
        )
        entry.refusals.append(
            refused("open_collection(index, tiny-bert-384) to write", lambda: self.open_as(other))
        )
        entry.refusals.append(self._write_around(other, data.texts[:2]))
        return entry

    def _write_around(self, other: EmbeddingContract, texts: list[str]) -> Refusal:
        """A raw client writes another encoder's vectors into a stamped index: caught on open."""
        from ctxemb_chroma import open_collection

        name = f"around-{uuid.uuid4().hex[:8]}"
        guarded = open_collection(self.client, name, self.vectors.embedder(self.right))
        guarded.add_embedded(
            self.data.ids[:16],
            self.docs["right"][:16],
            self.data.texts[:16],
            fingerprint=self.right.fingerprint,
        )
        raw = self.client.get_collection(name)
        raw.add(
            ids=["foreign-0", "foreign-1"],
            embeddings=self.vectors.documents(other, texts),
            documents=texts,
        )
        return refused(
            "raw chromadb add into a stamped index, then open_collection",
            lambda: open_collection(self.client, name, self.vectors.embedder(self.right)),
        )

    # -- 5 -------------------------------------------------------------------------------------

    def unit(self) -> Entry:
        from ctxemb_core.rerank import TokenVectorStore, maxsim, rerank_contract_for

        embedder = self.vectors.embedder(self.right)
        money = "The central bank raised interest rates."
        river = "Willow roots hold the river bank together."
        bank_money = embedder.word_vector("bank", [money]).vector
        bank_river = embedder.word_vector("bank", [river]).vector
        bank_type = embedder.word_vector("bank", [money, river]).vector
        pooled_money, pooled_river, pooled_word = embedder.embed_documents([money, river, "bank"])
        entry = Entry("unit", "A pooled text vector read as a token vector", "unit")
        entry.measures["cosines"] = {
            "bank token (money) vs bank token (river)": cosine(bank_money, bank_river),
            "pooled money sentence vs its bank token": cosine(pooled_money, bank_money),
            "pooled river sentence vs its bank token": cosine(pooled_river, bank_river),
            'pooled "bank" vs bank token (money)': cosine(pooled_word, bank_money),
            'pooled "bank" vs bank token (river)': cosine(pooled_word, bank_river),
            'bank word type (mean of both) vs pooled "bank"': cosine(bank_type, pooled_word),
        }
        entry.measures["cosines"] = {k: round(v, 4) for k, v in entry.measures["cosines"].items()}
        late = rerank_contract_for(self.right, kind="late_interaction")
        store = TokenVectorStore()
        query_tokens = embedder.embed_tokens("who raised interest rates", role="query").vectors
        entry.refusals.append(
            refused(
                "TokenVectorStore.put(late contract, [pooled vector])",
                lambda: store.put(late, ["money"], [pooled_money]),
            )
        )
        entry.refusals.append(
            refused(
                "maxsim(query tokens, [pooled vector])",
                lambda: maxsim(query_tokens, [pooled_money]),
            )
        )
        # What no check can see: a pooled vector reshaped to one "token" is a valid matrix.
        silent = maxsim(query_tokens, [pooled_money[None, :]])
        entry.notes.append(
            "a pooled vector reshaped to (1, 384) passes maxsim as a one-token document "
            f"(score {float(silent[0]):.3f}): an array does not record its unit"
        )
        return entry

    # -- 6 -------------------------------------------------------------------------------------

    def matryoshka(self) -> Entry:
        data, right = self.data, self.right
        cut = right.with_(truncate_dim=TRUNCATE)
        # Truncated prefixes of the unit vectors, searched by inner product as they are.
        no_renorm = search(
            data,
            self.queries["right"][:, :TRUNCATE],
            np.ascontiguousarray(self.docs["right"][:, :TRUNCATE]),
        )
        # The contract's recipe is pool -> truncate -> normalise: the un-normalised pooled
        # vectors of entry 2 hold everything it needs, so the corpus is not embedded again.
        q_raw, d_raw = self.unnormalised()
        d_cut = to_unit(d_raw[:, :TRUNCATE])
        q_cut = to_unit(q_raw[:, :TRUNCATE])
        # The proof: the truncated contract's own Embedder gives the same query vectors.
        gap = float(np.abs(self.vectors.queries(cut, data.queries) - q_cut).max())
        contract = search(data, q_cut, d_cut)
        entry = Entry(
            "matryoshka", "Matryoshka truncation, with and without re-normalising", "normalize"
        )
        entry.ndcg[f"first {TRUNCATE} dims, not re-normalised"] = no_renorm.ndcg
        label = f"truncate_dim={TRUNCATE} contract (re-normalised)"
        entry.ndcg[label] = contract.ndcg
        entry.own_contract.append(label)
        entry.measures["renormalised_vs_not"] = rank_change(contract.top, no_renorm.top)
        entry.measures["max_abs_gap_to_embedder"] = gap
        entry.notes.append(
            f"MiniLM is not Matryoshka-trained: any cut to {TRUNCATE} dims costs nDCG; the "
            "contract makes the cut explicit, re-normalised, and a contract of its own"
        )
        entry.refusals.append(
            refused(f"open_collection(index, truncate_dim={TRUNCATE})", lambda: self.open_as(cut))
        )
        return entry

    # -- 7 -------------------------------------------------------------------------------------

    def langchain(self) -> Entry:
        from langchain_chroma import Chroma

        from ctxemb_langchain import ContractChroma, ContractEmbeddings

        data = self.data
        # On the gallery's cache: entry 1 embedded these CLS queries, and the right ones are the
        # reference's; one query at a time gives the same vectors bit for bit.
        cls = ContractEmbeddings(self.right.with_(pooling="cls"), cache=self.vectors.cache)
        right = ContractEmbeddings(self.right, cache=self.vectors.cache)

        def run(embeddings: ContractEmbeddings) -> dict[str, dict[str, float]]:
            store = Chroma(self.stamped_name, embeddings, client=self.client)
            out = {}
            for qid, query in zip(data.qids, data.queries, strict=True):
                hits = store.similarity_search_with_score(query, k=K)
                out[qid] = {str(doc.id): 1.0 - float(dist) for doc, dist in hits}
            return out

        entry = Entry("langchain", "LangChain Chroma opened with the wrong embeddings", "pooling")
        entry.ndcg["plain LangChain Chroma, CLS query embeddings"] = run_ndcg(data, run(cls))
        entry.reference["plain LangChain Chroma, right embeddings"] = run_ndcg(data, run(right))
        entry.refusals.append(
            refused(
                "ContractChroma(index, ContractEmbeddings(cls))",
                lambda: ContractChroma(self.stamped_name, cls, client=self.client),
            )
        )
        return entry

    # -- 8 -------------------------------------------------------------------------------------

    def lexical(self) -> Entry:
        """BM25 queried with another analyzer than the index's, then the hybrid guard."""
        import ctxemb_chroma
        from ctxemb_core.hybrid import Analyzer, LexicalContract, LexicalIndex

        data = self.data
        stemmed = LexicalContract()
        index = LexicalIndex.fit(data.ids, data.texts, stemmed)

        def bm25(query_side: LexicalContract, on: LexicalIndex) -> float:
            analyzer = Analyzer(query_side)
            run = {}
            for qid, query in zip(data.qids, data.queries, strict=True):
                scores = on.term_scores(analyzer.terms(query))
                top = np.argsort(-scores, kind="stable")[:K]
                run[qid] = {on.ids[j]: float(scores[j]) for j in top if scores[j] > 0}
            return run_ndcg(data, run)

        entry = Entry("lexical", "BM25 queried with another analyzer than the index's", "lexical")
        entry.reference["BM25, the index's recipe on both sides"] = bm25(stemmed, index)
        entry.compare = entry.reference["BM25, the index's recipe on both sides"]
        unstemmed = stemmed.with_(stemmer="none")
        entry.ndcg["BM25, queries not stemmed (index stemmed)"] = bm25(unstemmed, index)
        kept = LexicalIndex.fit(data.ids, data.texts, stemmed.with_(stopwords="none"))
        entry.reference["BM25, stop words kept on both sides"] = bm25(kept.contract, kept)
        entry.ndcg["BM25, queries drop stop words (index keeps them)"] = bm25(stemmed, kept)
        hybrid = ctxemb_chroma.open_hybrid(
            self.client,
            self.stamped_name,
            self.vectors.embedder(self.right),
            sample=0,
        )
        entry.measures["hybrid_fingerprint"] = hybrid.contract.fingerprint
        entry.refusals.append(
            refused(
                "open_hybrid(index, lexical=stemmer 'none')",
                lambda: ctxemb_chroma.open_hybrid(
                    self.client,
                    self.stamped_name,
                    self.vectors.embedder(self.right),
                    lexical=unstemmed,
                    sample=0,
                ),
            )
        )
        entry.refusals.append(
            refused(
                "hybrid.query(q, lexical=stop words 'none')",
                lambda: hybrid.query(data.queries[0], lexical=stemmed.with_(stopwords="none")),
            )
        )
        return entry

    # -- 9 -------------------------------------------------------------------------------------

    def dedup(self) -> Entry:
        """Stock deduplication after a model change: LangChain's ``index()`` with a record
        manager and Haystack's ``DuplicatePolicy.SKIP`` key on the text, so every document is
        skipped and the old vectors are searched with the new model's queries. CLS pooling
        stands in for the new model (same width), as in entry 1: its query vectors are entry
        1's (cached) and its document vectors are the ones entry 1 derived, so nothing is
        embedded at corpus scale here."""
        from langchain_chroma import Chroma
        from langchain_core.documents import Document
        from langchain_core.indexing import InMemoryRecordManager, index

        from ctxemb_langchain import ContractChroma, ContractEmbeddings

        data, right = self.data, self.right
        new = right.with_(pooling="cls")
        self.document_poolings()
        q_new = self.vectors.queries(new, data.queries)
        entry = Entry("dedup", "Stock deduplication after a model change", "dedup")
        own = search(data, q_new, self.docs["cls"]).ndcg
        entry.measures["new_contract_reembedded_ndcg"] = own

        # LangChain: index() into a plain Chroma under the old embeddings, then again under
        # the new ones. The record manager's key is a hash of the text and metadata only.
        old_embeddings = ContractEmbeddings(right, cache=self.vectors.cache)
        new_embeddings = ContractEmbeddings(new, cache=self.vectors.cache)
        docs = [
            Document(page_content=t, metadata={"source": i})
            for i, t in zip(data.ids, data.texts, strict=True)
        ]
        records = InMemoryRecordManager("chroma/lc-dedup")
        records.create_schema()
        space = {"hnsw": {"space": "cosine", "ef_search": 200}}

        def stock_index(embeddings: ContractEmbeddings) -> Any:
            store = Chroma(
                "lc-dedup", embeddings, client=self.client, collection_configuration=space
            )
            result = index(
                docs,
                records,
                store,
                cleanup="incremental",
                source_id_key="source",
                key_encoder="sha256",
            )
            return store, result

        _, first = stock_index(old_embeddings)
        upgraded, second = stock_index(new_embeddings)
        entry.measures["langchain_index_before"] = dict(first)
        entry.measures["langchain_index_after_model_change"] = dict(second)
        run = {}
        for qid, query in zip(data.qids, data.queries, strict=True):
            hits = upgraded.similarity_search_with_score(query, k=K)
            run[qid] = {str(d.metadata["source"]): 1.0 - float(dist) for d, dist in hits}
        entry.ndcg["LangChain index() after the change: all skipped"] = run_ndcg(data, run)

        # Haystack: a document's id is a hash of its content and metadata; a pipeline re-run
        # under the new model embeds again (here: the vectors entry 1 derived), and the
        # writer's SKIP policy drops every one of them.
        written, damage = self._haystack_skip(q_new)
        entry.measures["haystack_documents_written"] = written
        entry.ndcg["Haystack DocumentWriter(SKIP) after the change"] = damage
        # LlamaIndex: IngestionPipeline's docstore keys a document on its id and content hash;
        # run again under the new model it embeds nothing and the store keeps the old vectors.
        llama, llama_damage = self._llamaindex_skip(new)
        entry.measures["llamaindex_ingestion"] = llama
        entry.ndcg["LlamaIndex IngestionPipeline after the change"] = llama_damage
        entry.notes.append(
            "no framework errs: LangChain reports every document skipped, Haystack writes 0 "
            'and logs "ID … already exists" per document, as it does for an unchanged re-run '
            "(the id hashes content and metadata), LlamaIndex's IngestionPipeline returns no "
            "node; the old vectors stay, searched by the new query encoder: the figure is "
            "entry 1's CLS queries on mean documents"
        )

        # ctxemb: the same re-index is refused, and an upgrade re-embeds every text.
        entry.refusals.append(
            refused(
                "index(docs, record_manager, ContractChroma(index, cls embeddings))",
                lambda: index(
                    docs[:2],
                    records,
                    ContractChroma(self.stamped_name, new_embeddings, client=self.client),
                    cleanup="incremental",
                    source_id_key="source",
                    key_encoder="sha256",
                ),
            )
        )
        entry.refusals.append(self._haystack_guarded(new))
        entry.refusals.append(self._llamaindex_guarded(new))
        entry.measures.update(self._upgrade(new, docs, new_embeddings))
        return entry

    def _haystack_skip(self, q_new: np.ndarray) -> tuple[dict[str, int], float]:
        """Haystack's own writer with ``DuplicatePolicy.SKIP``, before and after the change."""
        import dataclasses

        from haystack import Document
        from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
        from haystack.components.writers import DocumentWriter
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        from haystack.document_stores.types import DuplicatePolicy

        data = self.data
        store = InMemoryDocumentStore(embedding_similarity_function="cosine", shared=False)
        writer = DocumentWriter(store, policy=DuplicatePolicy.SKIP)
        converted = [
            Document(content=t, meta={"doc_id": i})
            for i, t in zip(data.ids, data.texts, strict=True)
        ]

        def embedded(vectors: np.ndarray) -> list[Any]:
            # What an embedder component returns: a copy with the vector, the id kept.
            return [
                dataclasses.replace(d, embedding=v.tolist())
                for d, v in zip(converted, vectors, strict=True)
            ]

        before = writer.run(documents=embedded(self.docs["right"]))["documents_written"]
        # The store logs one warning per skipped id; collected here rather than printed.
        with logged("haystack.document_stores.in_memory.document_store") as said:
            after = writer.run(documents=embedded(self.docs["cls"]))["documents_written"]
        written = {
            "before": before,
            "after_model_change": after,
            "stored": store.count_documents(),
            "warnings": len(said),
            "warning": re.sub(r"'[0-9a-f]{64}'", "'<sha256>'", said[0]) if said else "",
        }
        retriever = InMemoryEmbeddingRetriever(store, top_k=K)
        run = {}
        for qid, vector in zip(data.qids, q_new, strict=True):
            found = retriever.run(query_embedding=vector.tolist())["documents"]
            run[qid] = {d.meta["doc_id"]: float(d.score) for d in found}
        return written, run_ndcg(data, run)

    def _haystack_guarded(self, new: EmbeddingContract) -> Refusal:
        """ctxemb's Haystack writer, SKIP policy, on a store written under the right contract:
        documents embedded under the new contract are refused, not skipped."""
        from haystack import Document
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        from haystack.document_stores.types import DuplicatePolicy

        from ctxemb_haystack import ContractDocumentEmbedder, ContractDocumentWriter

        head = [
            Document(content=t, meta={"doc_id": i})
            for i, t in zip(self.data.ids[:2], self.data.texts[:2], strict=True)
        ]
        store = InMemoryDocumentStore(embedding_similarity_function="cosine", shared=False)
        writer = ContractDocumentWriter(store, DuplicatePolicy.SKIP)

        def embed(contract: EmbeddingContract) -> list[Any]:
            embedder = ContractDocumentEmbedder(contract=contract, progress_bar=False)
            return embedder.run(head)["documents"]

        writer.run(embed(self.right))
        return refused(
            "ContractDocumentWriter(policy=SKIP).run(documents embedded under cls)",
            lambda: writer.run(embed(new)),
        )

    def _primed(self) -> EmbeddingCache:
        """A cache of the documents' vectors under the right contract and under CLS pooling
        (entry 1's, derived from one token pass), for LlamaIndex's ``ContractEmbedding``: its
        pipelines read the corpus from it rather than embed it again. A file of the run's own,
        so that the derived vectors never enter a cache the Embedder's vectors live in."""
        if not hasattr(self, "_llama_cache"):
            cache = EmbeddingCache(self.workdir / "llamaindex-documents.sqlite3")
            for contract, name in ((self.right, "right"), (self.right.with_(pooling="cls"), "cls")):
                # Under the key the contract's Embedder reads its cache by (its source's).
                key = self.vectors.embedder(contract).source.cache_key
                cache.put_many(key, "document", self.data.texts, self.docs[name])
            self._llama_cache = cache
        return self._llama_cache

    def _llamaindex_skip(self, new: EmbeddingContract) -> tuple[dict[str, Any], float]:
        """Stock ``IngestionPipeline`` (a docstore and a vector store, LlamaIndex's in-memory
        ones) run under the old model, then under the new one; then ctxemb's pipeline, whose
        docstore keeps a namespace per contract. Each store's vectors are searched exactly
        with the new model's queries (as the gallery's numpy rows)."""
        from llama_index.core import Document
        from llama_index.core.ingestion import IngestionPipeline
        from llama_index.core.storage.docstore import SimpleDocumentStore
        from llama_index.core.vector_stores import SimpleVectorStore

        from ctxemb_llamaindex import ContractEmbedding, ContractIngestionPipeline

        data, cache = self.data, self._primed()
        q_new = self.vectors.queries(new, data.queries)
        models = [ContractEmbedding(c, cache=cache) for c in (self.right, new)]
        pairs = list(zip(data.ids, data.texts, strict=True))
        found: dict[str, Any] = {}
        for name, pipeline in (("stock", IngestionPipeline), ("ctxemb", ContractIngestionPipeline)):
            docstore, store = SimpleDocumentStore(), SimpleVectorStore()
            runs = []
            for model in models:  # the old model, then the new one, over the same docstore
                run = pipeline(transformations=[model], docstore=docstore, vector_store=store)
                runs.append(len(run.run(documents=[Document(id_=i, text=t) for i, t in pairs])))
            held = store.data.embedding_dict
            vectors = np.asarray([held[i] for i in data.ids], dtype=np.float32)
            found[name] = {"nodes_embedded": runs, "ndcg": search(data, q_new, vectors).ndcg}
        measures = {
            "stock_nodes_embedded_before_and_after": found["stock"]["nodes_embedded"],
            "contract_pipeline_nodes_embedded_before_and_after": found["ctxemb"]["nodes_embedded"],
            "contract_pipeline_ndcg": found["ctxemb"]["ndcg"],
        }
        return measures, found["stock"]["ndcg"]

    def _llamaindex_guarded(self, new: EmbeddingContract) -> Refusal:
        """ctxemb's pipeline into the gallery's stamped collection (through LlamaIndex's store
        on it), the new model among its transformations: the nodes are refused, not skipped."""
        from llama_index.core import Document
        from llama_index.core.storage.docstore import SimpleDocumentStore

        from ctxemb_llamaindex import (
            ContractChromaVectorStore,
            ContractEmbedding,
            ContractIngestionPipeline,
        )

        cache = self._primed()
        store = ContractChromaVectorStore(
            self.stamped_name, ContractEmbedding(self.right, cache=cache), client=self.client
        )
        pipeline = ContractIngestionPipeline(
            transformations=[ContractEmbedding(new, cache=cache)],
            docstore=SimpleDocumentStore(),
            vector_store=store,
        )
        pairs = zip(self.data.ids[:2], self.data.texts[:2], strict=True)
        head = [Document(id_=i, text=t) for i, t in pairs]
        return refused(
            "ContractIngestionPipeline([cls ContractEmbedding], store on the index).run(docs)",
            lambda: pipeline.run(documents=head),
        )

    def _upgrade(
        self, new: EmbeddingContract, docs: list[Any], new_embeddings: Any
    ) -> dict[str, Any]:
        """An upgrade through ctxemb: the dry run over the gallery's stamped index plans every
        document, and a real upgrade of a small stamped slice re-embeds every text of it."""
        from langchain_chroma import Chroma
        from langchain_core.indexing import InMemoryRecordManager, index

        from ctxemb_chroma import catalog, open_collection
        from ctxemb_core.aliases import (
            Encoders,
            backfill,
            begin_upgrade,
            create_alias,
            plan_upgrade,
        )

        data, right = self.data, self.right
        store = catalog(self.client)
        encoders = Encoders(self.vectors.embedder(right), self.vectors.embedder(new))
        create_alias(store, "scifact-live", self.stamped_name)
        plan = plan_upgrade(store, "scifact-live", self.vectors.embedder(new), encoders, measure=8)
        # A slice, upgraded for real: its own stamped index and alias, backfilled twice.
        head = slice(0, DEDUP_SLICE)
        part = open_collection(self.client, "dedup-slice", self.vectors.embedder(right))
        part.add_embedded(
            data.ids[head],
            self.docs["right"][head],
            data.texts[head],
            fingerprint=right.fingerprint,
        )
        create_alias(store, "dedup-live", "dedup-slice")
        begin_upgrade(store, "dedup-live", self.vectors.embedder(new))
        first = backfill(store, "dedup-live", encoders, progress=False)
        again = backfill(store, "dedup-live", encoders, progress=False)
        # Staying with LangChain's index(): a record-manager namespace per contract starts an
        # empty record set under the new contract, so every document is added again.
        space = f"chroma/lc-dedup/{new.fingerprint[:12]}"
        fresh = InMemoryRecordManager(space)
        fresh.create_schema()
        per_contract = index(
            docs[head],
            fresh,
            Chroma(f"lc-dedup-{new.fingerprint[:10]}", new_embeddings, client=self.client),
            cleanup="incremental",
            source_id_key="source",
            key_encoder="sha256",
        )
        return {
            "plan_upgrade": {
                "documents_to_reembed": plan.documents,
                "index_holds": self.guarded.count(),
                "shadow": plan.shadow,
            },
            "upgrade_slice": {
                "documents": DEDUP_SLICE,
                "backfill_written": first.written,
                "backfill_again_written": again.written,
                "backfill_again_unchanged": again.unchanged,
            },
            "langchain_namespace_per_contract": {"namespace": space, **dict(per_contract)},
        }


ENTRIES = (
    "pooling",
    "normalize",
    "prefix",
    "encoders",
    "unit",
    "matryoshka",
    "langchain",
    "lexical",
    "dedup",
)


# -- output ------------------------------------------------------------------------------------


def print_entry(number: int, entry: Entry, right: float) -> None:
    symptom, cause, fix = SEED_ROWS[entry.seed]
    print(f"\n{number}. {entry.title}  ({entry.seconds:.1f} s)")
    print(f"   seed row   {symptom} | {cause} | {fix}")
    base = right if entry.compare is None else entry.compare
    for label, value in entry.ndcg.items():
        print(f"   nDCG@10    {value:.4f}  {label}  ({value - base:+.4f} vs right {base:.4f})")
    for label, value in entry.reference.items():
        print(f"   reference  {value:.4f}  {label}")
    for name, value in entry.measures.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
            print(f"   {name}: {inner}")
        else:
            print(f"   {name}: {_fmt(value)}")
    for r in entry.refusals:
        extra = f" fields={r.fields}" if r.fields else ""
        extra += f" kind={r.kind}" if r.kind else ""
        print(f"   refused    {r.call}\n              -> {r.error}{extra}: {r.message}")
        for line in r.detail:
            print(f"                 {_short(line)}")
    for note in entry.notes:
        print(f"   note       {note}")


def _short(text: str, limit: int = 88) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(value: Any) -> str:
    if not isinstance(value, float):
        return str(value)
    return f"{value:.4f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.1e}"


def print_summary(entries: list[Entry], right: float) -> None:
    print(f"\n{'entry':<14} {'wrong recipe':<46} {'nDCG@10':>8} {'change':>8}  ctxemb raises")
    print(f"{'right':<14} {'all-MiniLM-L6-v2, mean, normalised':<46} {right:>8.4f} {'':>8}  -")
    for e in entries:
        error = e.refusals[0].error if e.refusals else "-"
        rows = list(e.ndcg.items()) or [("(no nDCG: see the measures)", None)]
        base = right if e.compare is None else e.compare
        for label, value in rows:
            figure = "" if value is None else f"{value:8.4f} {value - base:+8.4f}"
            print(f"{e.key:<14} {label:<46} {figure:>17}  {error}")


def save_chart(entries: list[Entry], right: float, docs: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    green, red, amber = "#2e7d32", "#c62828", "#ef8f00"
    labels, values, colors = ["right contract (mean pooling, normalised)"], [right], [green]
    for number, e in enumerate(entries, start=1):
        if e.compare is not None:  # the entry's own right recipe, charted beside its wrong ones
            for label, value in list(e.reference.items())[:1]:
                labels.append(f"{number}. {label}")
                values.append(value)
                colors.append(green)
        for label, value in e.ndcg.items():
            labels.append(f"{number}. {label}")
            values.append(value)
            colors.append(amber if label in e.own_contract else red)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.6))
    y = np.arange(len(labels))[::-1]
    ax.barh(y, values, color=colors)
    ax.axvline(right, color=green, linestyle="--", linewidth=1)
    for yi, v in zip(y, values, strict=True):
        ax.text(v + 0.005, yi, f"{v:.3f}", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, max(values) * 1.18)
    ax.set_xlabel(
        "SciFact nDCG@10\n(exact search; 4, 7 and 9's LangChain row through Chroma's HNSW index)"
    )
    ax.set_title(
        f"all-MiniLM-L6-v2 on SciFact ({docs:,} documents, 300 test queries):\n"
        "the right contract vs each wrong recipe, searched without ctxemb",
        fontsize=9,
    )
    ax.legend(
        handles=[
            Patch(color=green, label="the index's contract"),
            Patch(color=red, label="a wrong recipe (ctxemb refuses it)"),
            Patch(color=amber, label="a contract of its own (refused on this index)"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.42, -0.1),
        ncol=3,
        fontsize=7,
        frameon=False,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


# -- command -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--docs",
        type=int,
        default=None,
        help="documents to index: every judged one, filled up with the corpus head to N "
        "(default: the whole corpus, 5,183)",
    )
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "failure_modes.png")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--data", type=Path, default=DATA, help="the BEIR SciFact folder")
    parser.add_argument("--cache", type=Path, default=None, help="embedding cache file")
    args = parser.parse_args(argv)
    if args.docs is not None and args.docs < 1:
        parser.error("--docs must be a positive number")
    return args


def run(data: SciFact, cache: EmbeddingCache) -> tuple[Gallery, list[Entry]]:
    """Every entry in order, printed as it is measured."""
    with tempfile.TemporaryDirectory(prefix="ctxemb-gallery-") as tmp, warnings.catch_warnings():
        # SciFact abstracts are cut at the contract's 256 tokens, as MTEB cuts them.
        warnings.simplefilter("ignore", TruncationWarning)
        t = time.perf_counter()
        gallery = Gallery(data, Path(tmp), cache)
        right = gallery.reference.ndcg
        print(f"right contract: {gallery.right.describe()}")
        seconds = gallery.seconds = time.perf_counter() - t
        print(
            f"  nDCG@10 {right:.5f}, exact search (index embedded and stamped in {seconds:.1f} s)"
        )
        entries = []
        for number, name in enumerate(ENTRIES, start=1):
            t = time.perf_counter()
            entry = getattr(gallery, name)()
            entry.seconds = time.perf_counter() - t
            entries.append(entry)
            print_entry(number, entry, right)
    return gallery, entries


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the gallery; returns (and with ``--json`` writes) every figure."""
    args = parse_args(argv)
    started = time.perf_counter()
    data = load_scifact(args.data, args.docs)
    print(f"SciFact: {len(data.ids):,} documents, {len(data.qids)} queries; model {MODEL}")
    with EmbeddingCache(args.cache) as cache:
        gallery, entries = run(data, cache)
    right = gallery.reference.ndcg
    print_summary(entries, right)
    save_chart(entries, right, len(data.ids), args.out)
    total = time.perf_counter() - started
    print(f"\nchart: {args.out}\ntotal: {total:.1f} s")
    result = {
        "model": MODEL,
        "documents": len(data.ids),
        "queries": len(data.qids),
        "right": {
            "contract": gallery.right.to_dict(),
            "describe": gallery.right.describe(),
            f"ndcg@{K}": right,
            "seconds": round(gallery.seconds, 1),
        },
        "entries": [
            {
                "key": e.key,
                "title": e.title,
                "seed_row": dict(zip(("symptom", "cause", "fix"), SEED_ROWS[e.seed], strict=True)),
                f"ndcg@{K}": e.ndcg,
                "reference": e.reference,
                "measures": e.measures,
                "refusals": [vars(r) for r in e.refusals],
                "notes": e.notes,
                "compare": e.compare,
                "seconds": round(e.seconds, 1),
            }
            for e in entries
        ],
        "chart": str(args.out),
        "seconds": round(total, 1),
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
