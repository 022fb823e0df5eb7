"""What the LlamaIndex adapter costs: ContractEmbedding against the core Embedder.

Every figure comes from one run on the same texts: the first 1,000 SciFact documents (BEIR-style
``title + " " + text``), with the bundled all-MiniLM-L6-v2 on the CPU. Two contenders, each
returning what LlamaIndex returns (a list of lists of floats, so ``.tolist()`` is timed in both):

* **adapter**: ``ContractEmbedding(contract).get_text_embedding_batch(texts)``, LlamaIndex's
  own batch call (its callback events and batching by ``embed_batch_size``), and the adapter's
  own work: the note of each vector's contract and role (:mod:`ctxemb_llamaindex._origins`, the
  digest a guarded store looks vectors up by);
* **core**: ``Embedder(contract).embed_documents(texts).tolist()`` with the same settings
  (backend ``"auto"``, batch size and token budget the defaults of both), so the difference is
  exactly what the adapter adds.

Each contender is warmed up first. A round embeds the documents once per contender, cut into
chunks of ``--chunk`` documents, the contenders taking turns chunk by chunk and alternating who
goes first, so load drifts hit both alike. A contender's documents/s is its median round; the
``paired`` ratio is the median over chunks of the per-chunk ratio (the figure noise moves
least); the process's CPU seconds per contender are reported too (on a shared machine other
processes' load moves them less than wall time). The adapter's vectors must equal the core's
exactly.

Run (from the repository root)::

    .venv/bin/python benchmarks/llamaindex_overhead.py             (2 rounds, a few minutes)
    .venv/bin/python benchmarks/llamaindex_overhead.py --quick     (a check, seconds)

Writes ``benchmarks/results/llamaindex_overhead.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    add_quick,
    command_line,
    flattened,
    machine_info,
    offline,
    paired_turns,
    quick_texts,
    quiet_truncation,
    scifact_texts,
    shown,
    write_result,
    writes,
)

ADAPTER = "ctxemb_llamaindex"
CORE = "ctxemb core"
TARGET_ADAPTER_CORE = 0.95  # documents/s of the adapter over the core: the adapter adds no cost

Side = Callable[[list[str]], list[list[float]]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("llamaindex_overhead")
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=1000, help="documents (default 1,000)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds (default 2)")
    parser.add_argument("--chunk", type=int, default=250, help="documents per turn (default 250)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    add_quick(
        parser,
        f"16 documents cut to their first {QUICK_WORDS} words, in chunks of 8, 1 round, "
        "a warm-up of 8",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.rounds, args.chunk = 16, 1, 8
    warm_n = 8 if args.quick else 64
    offline()

    import llama_index.core

    from ctxemb_core import Embedder, contract_for
    from ctxemb_llamaindex import ContractEmbedding

    quiet_truncation()  # SciFact abstracts are cut at the contract's 256 tokens, alike
    texts = scifact_texts(args.data, args.n)
    if args.quick:
        texts = quick_texts(texts)
    load_start = os.getloadavg()

    contract = contract_for(MODEL)
    adapter = ContractEmbedding(contract)
    core = Embedder(contract, show_progress=False)
    settings = {
        name: {"backend": e.backend, "batch_size": e.batch_size, "token_budget": e.token_budget}
        for name, e in (("adapter", adapter.embedder), ("core", core))
    }
    if settings["adapter"] != settings["core"]:
        raise SystemExit(f"the adapter and the core run with different settings: {settings}")
    print(f"backend {core.backend}, batch_size {core.batch_size}, token_budget {core.token_budget}")

    sides: dict[str, Side] = {
        ADAPTER: adapter.get_text_embedding_batch,
        CORE: lambda batch: core.embed_documents(batch).tolist(),
    }
    shared = dict.fromkeys(sides, texts)
    paired_turns(sides, dict.fromkeys(sides, texts[:warm_n]), warm_n, 0)  # warm-up

    print(f"{args.rounds} round(s): {len(texts)} documents in chunks of {args.chunk}")
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    cpu_seconds: dict[str, float] = dict.fromkeys(sides, 0.0)
    per_chunk: list[dict[str, float]] = []
    vectors: dict[str, list[list[float]]] = {}
    for r in range(args.rounds):
        spent, chunks, outputs, cpu = paired_turns(sides, shared, args.chunk, r)
        vectors = {name: flattened(parts) for name, parts in outputs.items()}
        per_chunk += chunks
        for name in sides:
            seconds[name].append(spent[name])
            cpu_seconds[name] += cpu[name]
        rates = "  ".join(f"{name} {len(texts) / spent[name]:.1f} docs/s" for name in sides)
        print(f"  round {r + 1}: {rates}", flush=True)

    docs_per_s = {name: len(texts) / statistics.median(s) for name, s in seconds.items()}
    ratio = docs_per_s[ADAPTER] / docs_per_s[CORE]
    paired = statistics.median(c[CORE] / c[ADAPTER] for c in per_chunk)
    cpu_ratio = cpu_seconds[CORE] / cpu_seconds[ADAPTER]
    equal = bool(np.array_equal(np.asarray(vectors[ADAPTER]), np.asarray(vectors[CORE])))
    load_end = os.getloadavg()

    info = machine_info()
    info["llama_index_core"] = llama_index.core.__version__
    verdict = "PASS" if ratio >= TARGET_ADAPTER_CORE else "FAIL"
    print(
        f"\n{len(texts)} SciFact documents, {args.rounds} round(s); {info['cpu_label']}; "
        f"load {load_start[0]:.2f} -> {load_end[0]:.2f}"
    )
    for name, rate in docs_per_s.items():
        print(f"docs/s {name:<18} {rate:8.1f}")
    print(f"ratio adapter / core      {ratio:8.3f}  >= {TARGET_ADAPTER_CORE}  {verdict}")
    print(f"  paired median (chunks)  {paired:8.3f}")
    print(f"  CPU seconds core/adapter {cpu_ratio:7.3f}")
    print(f"adapter vectors == core   {equal!s:>8}")

    payload = {
        "model": MODEL,
        "documents": len(texts),
        "source": "SciFact corpus (BEIR), first documents, title + ' ' + text",
        "rounds": args.rounds,
        "chunk": args.chunk,
        "settings": settings,
        "seconds": seconds,
        "docs_per_s": docs_per_s,
        "adapter_core_docs_ratio": ratio,
        "adapter_core_docs_ratio_paired_median": paired,
        "cpu_seconds": cpu_seconds,
        "adapter_core_cpu_ratio": cpu_ratio,
        "target_adapter_core_docs_ratio": TARGET_ADAPTER_CORE,
        "adapter_vectors_equal_core": equal,
        "chunk_seconds": {name: [c[name] for c in per_chunk] for name in seconds},
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in load_end],
        "machine": info,
    }
    path = write_result("llamaindex_overhead", payload, args.out, quick=args.quick)
    print(f"wrote {shown(path)}")
    print(f"reproduce: {command_line()}")
    # A quick run's timings are too short to hold to the speed target; the vectors still are.
    return 0 if equal and (args.quick or ratio >= TARGET_ADAPTER_CORE) else 1


if __name__ == "__main__":
    raise SystemExit(main())
