"""Two-stage search: a bi-encoder shortlist from a stamped Chroma collection, then a rerank.

What this shows:

1. the demo corpus (``ctxemb_core/demo/corpus.jsonl``, 24 short documents) is indexed into an
   embedded Chroma collection
   stamped with the bundled all-MiniLM-L6-v2 contract.
2. Each query of the demo queries is answered in two stages by
   ``ctxemb_chroma.search``: ``k`` candidates from the bi-encoder (the stamp checked before any
   leaves the index), reranked to ``n`` by a :class:`LateInteractionReranker`: MaxSim,
   ``Σ_i max_j q_i · d_j``, over MiniLM's own token vectors (the one encoder installable here;
   it was not trained for late interaction, so this shows the mechanics, not a quality gain).
   Each result names the index's contract and the reranker's.
3. A score threshold set under one reranker contract is refused by a reranker under another
   (``RerankerMismatchError`` naming the field), and the collection refuses a querying contract
   that is not its own (``ContractMismatchError``), before anything is returned.

A trained cross-encoder slots in the same way: ``reranker_for(rerank_contract_for(folder))`` for
a sentence-transformers CrossEncoder folder (a plain transformers folder also needs
``activation=``).

Run (from the repository root)::

    .venv/bin/python examples/two_stage.py                # a temporary folder
    .venv/bin/python examples/two_stage.py --path ./db    # a folder that stays
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub from an example

from ctxemb_chroma import connect, open_collection, search
from ctxemb_core import Embedder, contract_for
from ctxemb_core import demo as demo_data
from ctxemb_core.errors import ContractMismatchError, RerankerMismatchError
from ctxemb_core.rerank import ScoreThreshold, rerank_contract_for, reranker_for

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COLLECTION = "two-stage"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def run(path: Path, k: int = 8, n: int = 3) -> None:
    contract = contract_for(MODEL)
    client = connect(path=str(path))
    docs = open_collection(client, COLLECTION, contract)
    rows = read_jsonl(demo_data.corpus_path())
    docs.add_missing([r["_id"] for r in rows], [f"{r['title']}. {r['text']}" for r in rows])
    print(f"index   {COLLECTION!r}: {docs.count()} documents, {contract.describe()}")

    reranker = reranker_for(rerank_contract_for(contract, kind="late_interaction"))
    print(f"rerank  {reranker.contract.describe()}\n")
    for query in read_jsonl(demo_data.queries_path()):
        result = search(docs, query["text"], reranker, k=k, n=n)
        print(f"{query['_id']}: {query['text']}")
        for hit in result:
            print(
                f"  {hit.id:<10} maxsim {hit.score:7.3f}   first stage #{hit.first_rank + 1} "
                f"(cosine {hit.first_score:.3f})"
            )
        print(
            f"  index {result.index_fingerprint[:12]}, reranker "
            f"{result.reranker_fingerprint[:12]}, rerank added "
            f"{result.rerank_seconds * 1000:.1f} ms"
        )

    threshold = ScoreThreshold(5.0, reranker.contract)
    other = reranker_for(reranker.contract.with_(token_normalize=False))
    print("\na threshold set under one reranker contract, used by another:")
    try:
        search(docs, "green tea", other, k=k, n=n, score_threshold=threshold)
    except RerankerMismatchError as err:
        print(f"  refused: RerankerMismatchError, fields {err.fields}")
    else:
        raise SystemExit("a threshold of another contract was accepted")

    print("the collection queried under another embedding contract:")
    try:
        search(docs, "green tea", reranker, embedder=Embedder(contract.with_(normalize=False)))
    except ContractMismatchError as err:
        print(f"  refused: ContractMismatchError, fields {err.fields}")
    else:
        raise SystemExit("the collection answered another contract: the guard did not run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, help="Chroma's folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.path is not None:
        run(args.path)
    else:
        with tempfile.TemporaryDirectory(prefix="ctxemb-two-stage-") as tmp:
            run(Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
