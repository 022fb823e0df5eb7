"""The ctxemb command against real Chroma: index, query, verify, migrate (resumed), eval.

Commands run in-process through ``main([...])``; a separate process only where the test needs one
to kill or interrupt.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import chromadb
import pytest
from chroma_server import chroma_server
from conftest import cache_with_run_exports

from ctxemb_core import demo as demo_data
from ctxemb_core.cli import main


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with chroma_server(tmp_path_factory.mktemp("cli-server") / "data") as port:
        yield port


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_index_query_verify_and_refuse_on_an_embedded_store(tmp_path, capsys):
    store = ["--path", str(tmp_path / "store"), "--collection", "demo"]
    code, first, _ = cli(capsys, "index", str(demo_data.corpus_path()), *store)
    assert code == 0 and "24 added, 0 updated, 0 unchanged; 24 documents" in first
    _, again, _ = cli(capsys, "index", str(demo_data.corpus_path()), *store)
    assert "0 added, 0 updated, 24 unchanged; 24 documents" in again
    _, hits, _ = cli(
        capsys, "query", "how do I keep slugs off lettuce", *store, "-k", "2", "--json"
    )
    assert json.loads(hits.splitlines()[0])["results"][0]["id"] == "garden-3"
    code, out, _ = cli(capsys, "verify", *store)
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["canary_cosine"] > 0.9999
    assert report["sample_size"] == 24
    code, _, err = cli(capsys, "query", "slugs", *store, "--pooling", "cls")
    assert code == 2
    assert "ContractMismatchError" in err and "pooling: index='mean'" in err
    code, out, err = cli(capsys, "verify", *store, "--no-normalize")
    assert code == 1
    assert json.loads(out)["diff"] == ["normalize: index=True, caller=False"]
    assert err.startswith("ctxemb: error: verify failed: the contract differs in normalize")
    assert len(err.splitlines()) == 1
    store[-1] = "nothing-here"
    code, _, err = cli(
        capsys, "verify", *store, "--model", "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert code == 2
    assert "InvalidInputError: collection 'nothing-here' does not exist" in err


def test_migrate_killed_midway_resumes_to_exactly_the_source(server, tmp_path, capsys):
    store = ["--host", "127.0.0.1", "--port", str(server)]
    assert main(["index", str(demo_data.corpus_path()), *store, "--collection", "src"]) == 0
    client = chromadb.HttpClient(host="127.0.0.1", port=server)
    source_ids = sorted(client.get_collection("src", embedding_function=None).get()["ids"])
    # A cache of its own (no embedding reused), reading the run's ONNX exports: the watcher
    # below waits for the first write, which an export built from scratch on a loaded machine
    # delays past any fixed deadline.
    own = cache_with_run_exports(tmp_path / "no-cache")
    env = {**os.environ, "CTXEMB_CACHE_DIR": str(own)}
    args = ["migrate", *store, "--collection", "src", "--to", "dst", "--truncate-dim", "128"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxemb_core.cli", *args, "--batch-size", "2", "--no-cache"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 600
    written = 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            written = client.get_collection("dst", embedding_function=None).count()
        except Exception:
            written = 0
        if written >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = client.get_collection("dst", embedding_function=None).count()
    assert 0 < partial < len(source_ids), "the kill must land mid-way for this test to mean much"
    capsys.readouterr()
    code, resumed, err = cli(capsys, *args)
    assert code == 0, err
    assert "dst: 24 documents" in resumed and "truncate_dim" in resumed
    dst = client.get_collection("dst", embedding_function=None).get()
    assert sorted(dst["ids"]) == source_ids and len(dst["ids"]) == len(set(dst["ids"]))
    src_after = sorted(client.get_collection("src", embedding_function=None).get()["ids"])
    assert src_after == source_ids
    code, out, _ = cli(capsys, "verify", *store, "--collection", "dst")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["sample_size"] == 24


@pytest.mark.slow
@pytest.mark.figures_extra  # the same path as test_eval_agreement's --via chroma-server
def test_scifact_eval_on_a_running_server_reproduces_the_published_ndcg(server, data_dir, capsys):
    # On a server named by --host/--port; an embedded store and a temporary server (--via
    # chroma, chroma-server) are tests/eval/test_eval_agreement.py's.
    store = ["--host", "127.0.0.1", "--port", str(server)]
    code, out, err = cli(capsys, "eval", "--data", str(data_dir / "scifact"), *store)
    assert code == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    published = json.loads(
        next((data_dir / "mteb_results" / "sentence-transformers__all-MiniLM-L6-v2").iterdir())
        .joinpath("SciFact.json")
        .read_text()
    )["scores"]["test"][0]["ndcg_at_10"]
    assert abs(result["ndcg@10"] - published) <= 0.005, (result["ndcg@10"], published)
    assert result["documents"] == 5183 and result["queries"] == 300
    assert {"recall@100", "mrr@10", "fingerprint"} <= set(result)


def _as_from_a_terminal() -> None:
    """In the child, before exec: SIGINT delivered and not ignored, as from a shell.

    A process inherits its parent's ignored and blocked signals, and Python installs no
    KeyboardInterrupt handler where SIGINT is ignored at start. A test run started as a
    background job of a non-interactive shell (``make test &``, ``nohup``: how a CI runner may
    start it) ignores SIGINT, so the child would never hear the interrupt and index everything.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_masks(pid: int) -> str:
    """The blocked, ignored and caught signal masks of a process (Linux), for a failure."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "no /proc"
    return ", ".join(x for x in status if x.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_ctrl_c_is_one_line_exit_130_and_a_rerun_finishes(server, tmp_path, capsys):
    store = ["--host", "127.0.0.1", "--port", str(server), "--collection", "interrupted"]
    # Enough documents that the interrupt lands mid-way on a busy machine too.
    copies = 8
    lines = [x for x in demo_data.corpus_path().read_text().splitlines() if x.strip()]
    total = copies * len(lines)
    docs = [{**json.loads(line), "_id": f"{i}-{json.loads(line)['_id']}"} for i in range(copies)
            for line in lines]  # fmt: skip
    corpus = str(tmp_path / "corpus.jsonl")
    Path(corpus).write_text("".join(json.dumps(d) + "\n" for d in docs))
    # A cache of its own (no embedding reused), reading the run's ONNX exports: the watcher
    # below waits for the first write, which an export built from scratch on a loaded machine
    # delays past any fixed deadline.
    own = cache_with_run_exports(tmp_path / "no-cache")
    env = {**os.environ, "CTXEMB_CACHE_DIR": str(own)}
    args = ["index", corpus, *store, "--batch-size", "1", "--no-cache"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxemb_core.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    client = chromadb.HttpClient(host="127.0.0.1", port=server)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            # Two records: the first batch's write has returned (a batch interrupted while its
            # write is under way is undone whole, so the one record of the first may still go).
            if client.get_collection("interrupted", embedding_function=None).count() >= 2:
                break
        except Exception:
            pass
        time.sleep(0.05)
    assert proc.poll() is None, f"the indexing ended before its second write: {proc.stderr.read()}"
    masks = _signal_masks(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    partial = client.get_collection("interrupted", embedding_function=None).count()
    assert 0 < partial < total, f"the interrupt must land mid-way ({masks})"
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if "ctxemb:" in line]
    assert len(said) == 1 and said[0].split("\r")[-1].startswith("ctxemb: error: interrupted")
    code, resumed, err = cli(capsys, "index", corpus, *store)
    assert code == 0, err
    # The batches written before the interrupt are found unchanged; the rest are added.
    assert f"{total - partial} added, 0 updated, {partial} unchanged; {total} documents" in resumed
