"""The published figures through Qdrant: ``ctxemb eval --via qdrant`` (local mode, exact search)
on SciFact and STS-B reproduces MiniLM's MTEB scores, and ``ctxemb detect`` names the contract of
the collection it wrote.

``figures_extra``: the whole of SciFact through one more store (~20 CPU-s with the corpus's
vectors in the embedding cache, minutes without) is left out of ``make test`` while CI is at its
900 s; ``make bench-check`` runs it."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest

from ctxemb_core.cli import main

#: MTEB's published all-MiniLM-L6-v2 figures.
SCIFACT_NDCG10, STSB_SPEARMAN = 0.64508, 0.82032


def _run(*args: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    assert code == 0, err.getvalue()
    return json.loads(
        out.getvalue().strip().splitlines()[-1] if args[0] == "eval" else out.getvalue()
    )


@pytest.mark.slow
@pytest.mark.figures_extra
@pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")
def test_scifact_and_sts_through_qdrant(tmp_path, data_dir, minilm_contract):
    store = ("--qdrant-path", str(tmp_path / "qdrant"))
    scifact = _run(
        "eval", "--via", "qdrant", *store, "--data", str(data_dir / "scifact"), "--k", "10"
    )
    assert (scifact["documents"], scifact["queries"]) == (5183, 300)
    assert scifact["fingerprint"] == minilm_contract.fingerprint
    assert scifact["store"] == {"kind": "local", "path": store[1]}
    assert abs(scifact["unrounded"]["ndcg@10"] - SCIFACT_NDCG10) <= 0.0005, scifact
    again = _run(
        "eval", "--via", "qdrant", *store, "--data", str(data_dir / "scifact"), "--k", "10"
    )
    assert again["indexed_now"] == 0  # the same stamped collection, opened verified
    sts = _run(
        "eval", "--via", "qdrant", *store, "--task", "sts", "--data", str(data_dir / "stsbenchmark")
    )
    assert sts["pairs"] == 1379
    assert abs(sts["unrounded"]["spearman"] - STSB_SPEARMAN) <= 0.0005, sts
    found = _run("detect", *store, "--collection", scifact["collection"], "--json")
    assert found["conclusive"]


def _mini(folder):
    """A BEIR set of three documents and one query."""
    folder.mkdir()
    docs = {"tea": "Green tea leaves are steamed.", "moon": "The moon orbits the earth."}
    lines = [json.dumps({"_id": k, "text": v}) for k, v in docs.items()]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "green tea"}) + "\n")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ttea\t1\n")
    return folder


def test_an_eval_refusal_advises_the_store_its_via_path_used(tmp_path):
    # The advice of `ctxemb eval --via qdrant` names Qdrant's options, not Chroma's --path.
    data = str(_mini(tmp_path / "mini"))
    store = ("--qdrant-path", str(tmp_path / "qdrant"), "--collection", "docs")
    _run("eval", "--via", "qdrant", *store, "--data", data)
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main(["eval", "--via", "qdrant", *store, "--data", data, "--no-normalize"])
    said = err.getvalue()
    assert code != 0 and "ContractMismatchError" in said, said
    assert "--qdrant-path" in said and " --path" not in said and "./chroma" not in said, said
