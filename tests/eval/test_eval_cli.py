"""``ctxemb eval`` in-process on a small BEIR folder and small STS files, through each Chroma-side
path (the core's exact search, an embedded store, a server, a temporary server), with run files,
the BM25 baseline and every refusal as one ``ctxemb: error:`` line that changes nothing."""

from __future__ import annotations

import json
import socket
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from conftest import DOCS

from ctxemb_core.cli import main
from ctxemb_core.eval import evaluate, read_run

QUERIES = {
    "q-tea": "how is green tea processed",
    "q-bike": "bicycle chain maintenance",
    "q-moon": "why does the moon change shape",
    "q-bank": "interest rates and central banks",
}
QRELS = [("q-tea", "tea", 1), ("q-bike", "bike", 2), ("q-moon", "moon", 1), ("q-bank", "bank", 1)]
STS_ROWS = [
    (5.0, "A man is playing a guitar.", "A man plays the guitar."),
    (0.2, "A woman is slicing onions.", "A dog runs across the beach."),
    (3.8, "Kids play football in the park.", "Children are playing soccer outside."),
    (1.0, "The stock market fell sharply.", "A chef cooks pasta."),
    (4.4, "A cat sleeps on the sofa.", "A kitten is napping on a couch."),
    (0.0, "Rain is expected tomorrow.", "He bought a new laptop."),
]


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def result(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])


def one_error(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxemb: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("beir") / "tiny"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in DOCS.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items())
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in QRELS)
    )
    return folder


def _sts_lines(rows: list[tuple[float, str, str]]) -> str:
    return "".join(
        f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g}\t{a}\t{b}\n"
        for i, (g, a, b) in enumerate(rows)
    )


@pytest.fixture(scope="module")
def sts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An STS Benchmark-shaped folder: sts-test.csv and a shorter sts-dev.csv."""
    folder = tmp_path_factory.mktemp("sts") / "stsbenchmark"
    folder.mkdir()
    (folder / "sts-test.csv").write_text(_sts_lines(STS_ROWS))
    (folder / "sts-dev.csv").write_text(_sts_lines(STS_ROWS[:4]))
    return folder


@pytest.fixture(scope="module")
def memory_retrieval(beir: Path, tmp_path_factory: pytest.TempPathFactory):
    """One exact-search run of the tiny BEIR folder: (JSON result, run file)."""
    run_file = tmp_path_factory.mktemp("runs") / "memory.run"
    # capsys is function-scoped: a module-scoped run reads its stdout itself.
    buffer = StringIO()
    with redirect_stdout(buffer):
        code = main(["eval", "--via", "memory", "--data", str(beir), "--run-file", str(run_file)])
    assert code == 0
    return result(buffer.getvalue()), run_file


# -- retrieval -------------------------------------------------------------------------------


def test_memory_retrieval_prints_one_json_line_last(memory_retrieval, beir, minilm):
    out, _ = memory_retrieval
    assert out["task"] == "retrieval" and out["via"] == "memory"
    assert out["store"] == {"kind": "memory"} and out["collection"] is None
    assert out["dataset"] == "tiny" and out["split"] == "test"
    assert (out["documents"], out["queries"], out["indexed_now"], out["k"]) == (6, 4, 6, 100)
    assert out["fingerprint"] == minilm.fingerprint
    assert out["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    for key in ("ndcg@10", "recall@100", "mrr@10", "map@100", "precision@1"):
        assert out[key] == round(out["unrounded"][key], 5)
    assert out["ndcg@10"] == 1.0
    assert "baseline" not in out


def test_the_run_file_reproduces_the_printed_metrics(memory_retrieval, beir):
    out, run_file = memory_retrieval
    lines = [line.split() for line in run_file.read_text().splitlines()]
    assert all(len(cols) == 6 and cols[1] == "Q0" and cols[5] == "ctxemb-memory" for cols in lines)
    by_query: dict[str, list[list[str]]] = {}
    for cols in lines:
        by_query.setdefault(cols[0], []).append(cols)
    for rows in by_query.values():
        assert [int(r[3]) for r in rows] == list(range(1, len(rows) + 1))
        scores = [float(r[4]) for r in rows]
        assert scores == sorted(scores, reverse=True)
    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in QRELS:
        qrels.setdefault(q, {})[d] = g
    assert evaluate(read_run(run_file), qrels) == out["unrounded"]


def test_embedded_chroma_matches_exact_search_and_reuses_its_index(
    memory_retrieval, beir, tmp_path, capsys
):
    store = tmp_path / "store"
    code, out, err = run(capsys, "eval", "--data", beir, "--path", store, "--k", 5)
    assert code == 0, err
    first = result(out)
    assert first["via"] == "chroma" and first["store"] == {"kind": "embedded", "path": str(store)}
    assert first["collection"] == f"beir-tiny-{first['fingerprint'][:12]}"
    assert first["indexed_now"] == 6 and first["k"] == 5
    assert set(first["unrounded"]) == {f"{m}@{k}" for m in METRICS for k in (1, 5)}
    exact = memory_retrieval[0]
    assert first["ndcg@5"] == pytest.approx(exact["unrounded"]["ndcg@10"], abs=1e-6)
    assert "indexing (chroma)" in err  # progress on stderr
    code, out, _ = run(capsys, "eval", "--data", beir, "--path", store, "--via", "chroma")
    assert code == 0 and result(out)["indexed_now"] == 0


METRICS = ("ndcg", "recall", "precision", "mrr", "map")


def test_a_chroma_server_given_by_host(beir, server, capsys):
    code, out, err = run(
        capsys, "eval", "--data", beir, "--via", "chroma-server", "--host", "127.0.0.1",
        "--port", server, "--collection", "eval-cli-server",
    )  # fmt: skip
    assert code == 0, err
    got = result(out)
    assert got["store"] == {"kind": "server", "host": "127.0.0.1", "port": server}
    assert got["collection"] == "eval-cli-server" and got["ndcg@10"] == 1.0


def test_a_temporary_chroma_server_is_started_and_stopped(beir, tmp_path, capsys):
    data = tmp_path / "server-data"
    code, out, err = run(capsys, "eval", "--data", beir, "--via", "chroma-server", "--path", data)
    assert code == 0, err
    got = result(out)
    assert got["store"]["kind"] == "temporary server" and got["ndcg@10"] == 1.0
    assert got["store"]["path"] == str(data)
    assert f"data in {data}" in err and (data / "chroma.sqlite3").is_file()
    with socket.socket() as s:  # stopped at the end: nothing listens on its port any more
        assert s.connect_ex(("127.0.0.1", got["store"]["port"])) != 0


def test_the_bm25_baseline_is_printed_beside_and_in_the_json(beir, capsys):
    code, out, err = run(capsys, "eval", "--data", beir, "--via", "memory", "--baseline", "bm25")
    assert code == 0, err
    got = result(out)
    baseline = got["baseline"]
    assert baseline["method"] == "bm25" and baseline["settings"].startswith("bm25s ")
    assert set(baseline["unrounded"]) == set(got["unrounded"])
    assert baseline["ndcg@10"] == round(baseline["unrounded"]["ndcg@10"], 5)
    header, *rows = out.strip().splitlines()[:-1]
    assert header.split() == ["memory", "bm25"]
    assert [r.split()[0] for r in rows] == ["ndcg@10", "recall@100", "mrr@10", "map@100"]
    assert rows[0].split()[1:] == [f"{got['ndcg@10']:.5f}", f"{baseline['ndcg@10']:.5f}"]


@pytest.mark.parametrize("via", ["haystack", "langchain", "haystack-chroma", "langchain-chroma"])
def test_the_framework_paths_are_reached_by_name(via, memory_retrieval, beir, tmp_path, capsys):
    store = ["--path", tmp_path / "store"] if via.endswith("-chroma") else []
    code, out, err = run(capsys, "eval", "--via", via, "--data", beir, *store)
    assert code == 0, err
    got = result(out)
    assert got["via"] == via and got["indexed_now"] == 6
    assert got["store"]["kind"] == ("embedded" if store else "memory")
    assert got["unrounded"] == pytest.approx(memory_retrieval[0]["unrounded"], abs=1e-6)


# -- STS -------------------------------------------------------------------------------------


def test_sts_through_memory_and_chroma_agree(sts, tmp_path, capsys):
    scores = tmp_path / "pairs.tsv"
    code, out, err = run(
        capsys, "eval", "--task", "sts", "--via", "memory", "--data", sts, "--run-file", scores
    )
    assert code == 0, err
    exact = result(out)
    assert exact["task"] == "sts" and exact["pairs"] == len(STS_ROWS)
    assert exact["file"] == "sts-test.csv" and exact["dataset"] == "stsbenchmark"
    assert set(exact["unrounded"]) == {"spearman", "pearson"} and exact["spearman"] > 0.8
    assert "ndcg@10" not in exact
    rows = scores.read_text().splitlines()
    assert rows[0] == "pair\tgold\tscore\tsentence1\tsentence2" and len(rows) == 1 + len(STS_ROWS)
    assert rows[1].split("\t")[3:] == list(STS_ROWS[0][1:])

    code, out, err = run(
        capsys, "eval", "--task", "sts", "--data", sts / "sts-test.csv", "--path", tmp_path / "s"
    )
    assert code == 0, err
    stored = result(out)
    assert stored["via"] == "chroma" and stored["collection"].startswith("sts-test-")
    assert stored["unrounded"]["spearman"] == pytest.approx(exact["unrounded"]["spearman"])
    assert stored["unrounded"]["pearson"] == pytest.approx(exact["unrounded"]["pearson"], 1e-6)


def test_sts_split_picks_the_file_in_the_folder(sts, capsys):
    code, out, err = run(
        capsys, "eval", "--task", "sts", "--via", "memory", "--data", sts, "--split", "dev"
    )
    assert code == 0, err
    assert result(out)["file"] == "sts-dev.csv" and result(out)["pairs"] == 4


# -- refusals: one line, exit 2, nothing created ---------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--via", "elastic"], "argument --via: invalid choice: 'elastic'"),
        (["--task", "qa"], "argument --task: invalid choice"),
        (["--baseline", "bm25", "--task", "sts", "--data", "{sts}"], "--task retrieval only"),
        (["--baseline", "tfidf"], "argument --baseline: invalid choice"),
        (["--data", "{missing}"], "not found"),
        (["--task", "sts", "--data", "{missing}"], "STS data not found"),
        (["--task", "sts", "--data", "{sts}", "--split", "train"], "holds no sts-train.csv"),
        (["--task", "sts", "--data", "{beir}/corpus.jsonl"], "expected at least 7"),
        (["--data", "{sts}"], "missing file"),
        (["--k", "0"], "argument --k"),
        (["--via", "memory", "--host", "h"], "--via memory does not use --host: it keeps"),
        (["--via", "memory", "--collection", "c1x"], "does not use --collection"),
        (["--via", "haystack", "--path", "{fresh}"], "Haystack's in-memory store"),
        (["--via", "langchain", "--sample", "0"], "LangChain's in-memory store"),
        (["--via", "haystack-chroma", "--sample", "3"], "--sample is for --via chroma"),
        (["--run-file", "{sts}"], "is a folder"),
        (["--host", "127.0.0.1"], "--host and --path"),
        (["--via", "chroma", "--port", "8000", "--path", "{fresh}"], "--port needs --host"),
        (["--collection", "no spaces"], "not one Chroma accepts"),
        (["--pooling", "average"], "invalid choice: 'average'"),
    ],
)
def test_bad_invocations_are_one_line_and_create_nothing(
    args, fragment, beir, sts, tmp_path, capsys
):
    fresh = tmp_path / "fresh"
    values = {"beir": beir, "sts": sts, "missing": tmp_path / "nowhere", "fresh": fresh}
    args = [a.format(**values) for a in args]
    if "--data" not in args:
        args += ["--data", str(beir)]
    if "--path" not in args and "memory" not in args:
        args += ["--path", str(fresh)]
    code, out, err = run(capsys, "eval", *args)
    assert code == 2 and out == "", (out, err)
    one_error(err, fragment)
    assert not fresh.exists()


def test_a_missing_framework_extra_names_its_install(beir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ctxemb_langchain", None)  # importing it now fails
    code, _, err = run(capsys, "eval", "--via", "langchain", "--data", beir)
    assert code == 2
    one_error(err, "MissingDependencyError", "pip install 'ctxemb[langchain]'")


def test_a_missing_bm25_extra_is_refused_before_any_work(beir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "bm25s", None)
    fresh = tmp_path / "fresh"
    code, _, err = run(capsys, "eval", "--data", beir, "--baseline", "bm25", "--path", fresh)
    assert code == 2
    one_error(err, "MissingDependencyError", "pip install 'ctxemb[eval]'")
    assert not fresh.exists()


def test_a_temporary_server_that_cannot_start_is_one_line(beir, tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(
            capsys, "eval", "--data", beir, "--via", "chroma-server", "--port", port,
            "--path", tmp_path / "d",
        )  # fmt: skip
    assert code == 2
    one_error(err, "StoreUnavailableError", "temporary Chroma server")


@pytest.mark.heavy
def test_a_temporary_server_is_stopped_on_an_error_too(beir, tmp_path, capsys):
    data = tmp_path / "server-data"
    common = ["eval", "--data", beir, "--via", "chroma-server", "--path", data]
    assert run(capsys, *common, "--collection", "kept")[0] == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run(capsys, *common, "--collection", "kept", "--port", port, "--pooling", "cls")
    assert code == 2
    one_error(err, "ContractMismatchError", "pooling")
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_contract_mismatch_on_a_reused_collection_is_one_line(beir, tmp_path, capsys):
    store = tmp_path / "store"
    common = ["eval", "--data", beir, "--path", store, "--collection", "shared-name"]
    assert run(capsys, *common)[0] == 0
    code, _, err = run(capsys, *common, "--pooling", "cls")
    assert code == 2
    one_error(err, "ContractMismatchError", "pooling")


def test_hybrid_scores_dense_bm25_and_their_fusion_in_one_command(beir, tmp_path, capsys):
    from ctxemb_core.eval import evaluate, load_beir
    from ctxemb_core.eval.bm25 import bm25_run
    from ctxemb_core.eval.runner import retrieval_cutoffs

    code, out, _ = run(
        capsys, "eval", "--via", "memory", "--data", beir, "--k", 5, "--hybrid", "--depth", 5
    )
    assert code == 0
    got = result(out)["hybrid"]
    assert got["contract"]["fusion"] == {
        **got["contract"]["fusion"],
        "method": "rrf",
        "k": 60,
        "depth": 5,
    }
    assert got["contract"]["lexical"]["documents"] == len(DOCS)
    # ctxemb's BM25 is the baseline's: the same figures on the same judgements.
    data = load_beir(beir)
    expected = evaluate(bm25_run(data, 5), data.qrels, ks=retrieval_cutoffs(5))
    for metric in ("ndcg@5", "recall@5"):
        assert abs(got["lexical"]["unrounded"][metric] - expected[metric]) < 1e-9, metric
    assert set(got["fused"]) >= {"ndcg@5", "unrounded"}
    assert "hybrid" in out.splitlines()[0]  # the table's columns: via, BM25, hybrid
    code, _, err = run(capsys, "eval", "--via", "memory", "--data", beir, "--k", 5, "--hybrid")
    assert code != 0 and "--depth 100 is more than --k 5" in err
    code, _, err = run(capsys, "eval", "--via", "memory", "--data", beir, "--stemmer", "none")
    assert code != 0 and "add --hybrid" in err
