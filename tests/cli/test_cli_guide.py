"""A CLI that guides (issue 14): flags from the code they configure, help with defaults and
examples, one line for every failure, labelled scores, nothing created by a command that reads.

Everything runs ``main([...])`` in-process except what only a real process shows: the console
script, a closed stdout pipe, and ResourceWarnings at interpreter exit.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chroma_server import free_port
from conftest import MINILM, fresh_name

import ctxemb_core.cli as cli_module
from ctxemb_core import Embedder, contract_for
from ctxemb_core import demo as demo_data
from ctxemb_core.cli import STORES, main
from ctxemb_core.contract import Pooling, Precision, Quantization
from ctxemb_core.eval.paths import VIAS
from ctxemb_core.resolve import FAMILY_PRESETS

CORPUS = str(demo_data.corpus_path())
CONTRACT_COMMANDS = ("inspect", "index", "query", "verify", "migrate", "restamp", "eval", "detect")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(err: str, *fragments: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxemb: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)
    return lines[0]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli_module._parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded store holding the demo corpus in the stamped collection ``demo``."""
    path = tmp_path_factory.mktemp("guide") / "store"
    assert main(["index", CORPUS, "--path", str(path), "--collection", "demo"]) == 0
    return path


# -- flags from the code they configure ------------------------------------------------------


def test_contract_flags_are_contract_for_keywords():
    keywords = {
        p.name
        for p in inspect.signature(contract_for).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert keywords >= {"pooling", "normalize", "query_prefix", "max_tokens", "precision"}
    commands = subcommands()
    for name in CONTRACT_COMMANDS:
        group = next(g for g in commands[name]._action_groups if g.title == "contract options")
        flags = {a.dest for a in group._group_actions}
        assert flags == keywords, name
        for action in group._group_actions:
            assert action.option_strings == ["--" + action.dest.replace("_", "-")] or (
                action.dest in ("normalize", "include_prompt")
            )


def test_enum_flags_take_their_choices_from_the_enums_and_presets():
    commands = subcommands()
    expected = {
        "pooling": [p.value for p in Pooling],
        "precision": [p.value for p in Precision],
        "quantization": [q.value for q in Quantization],
        "family": list(FAMILY_PRESETS),
    }
    for name in CONTRACT_COMMANDS:
        actions = {a.dest: a for a in commands[name]._actions}
        for dest, choices in expected.items():
            assert list(actions[dest].choices) == choices, (name, dest)
        if "store" in actions:
            assert list(actions["store"].choices) == list(STORES)
    evaluate = {a.dest: a for a in commands["eval"]._actions}
    assert list(evaluate["via"].choices) == list(VIAS)


@pytest.mark.parametrize(
    ("flag", "valid"),
    [
        ("--pooling", [p.value for p in Pooling]),
        ("--precision", [p.value for p in Precision]),
        ("--quantization", [q.value for q in Quantization]),
        ("--family", list(FAMILY_PRESETS)),
    ],
)
def test_a_wrong_enum_value_is_one_line_listing_the_valid_ones(flag, valid, capsys):
    code, out, err = run(capsys, "inspect", MINILM, flag, "nonsense")
    assert code == 2 and out == ""
    line = one_error(err, f"argument {flag}: invalid choice: 'nonsense'")
    assert all(repr(v) in line for v in valid)


@pytest.mark.parametrize(
    "args",
    [["index", CORPUS, "--store", "pinecone"], ["eval", "--via", "faiss"], ["eval", "--task", "x"]],
)
def test_other_enum_flags_are_refused_the_same_way(args, capsys):
    code, _, err = run(capsys, *args)
    assert code == 2
    one_error(err, "invalid choice", "choose from")


# -- help: defaults, examples, exit codes -----------------------------------------------------


def test_every_subcommand_help_shows_defaults_and_an_example(capsys):
    for name, parser in subcommands().items():
        code, out, err = run(capsys, name, "--help")
        assert code == 0 and err == "", name
        text = " ".join(out.split())
        assert "(default: " in text or name == "export", name
        assert f"examples: ctxemb {name}" in text or f"ctxemb {name} " in out, name
        # Every option with a real default shows it.
        for action in parser._actions:
            shown = action.default not in (None, False, argparse.SUPPRESS)
            if shown and action.option_strings and action.help != argparse.SUPPRESS:
                assert str(action.default) in text, (name, action.dest)


def test_exit_codes_are_documented_in_the_help_and_the_module(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for text in (out, cli_module.__doc__ or ""):
        for exit_code, words in (("0", "success"), ("1", "check"), ("2", "bad input")):
            assert re.search(rf"^\s+{exit_code}\s+.*{words}", text, re.M), (exit_code, text)
        assert re.search(r"^\s+130\s+interrupted", text, re.M)


def test_help_of_the_defaults_and_examples_of_index(capsys):
    _, out, _ = run(capsys, "index", "--help")
    text = " ".join(out.split())
    assert "documents per write (≥ 1) (default: 512)" in text
    assert "--path PATH embedded store folder (default: ./chroma)" in text
    assert "ctxemb index corpus.jsonl --collection docs --path ./chroma" in out


# -- one line, in the command line's terms ---------------------------------------------------


def test_a_wrong_port_is_one_line_saying_how_to_start_the_server(tmp_path, capsys):
    port = free_port()  # nothing listens there
    for args in (["query", "slugs"], ["index", CORPUS], ["detect"]):
        code, _, err = run(
            capsys, *args, "--collection", "demo", "--host", "127.0.0.1", "--port", str(port)
        )
        assert code == 2, args
        one_error(
            err,
            f"cannot reach the Chroma server at 127.0.0.1:{port} (connection refused); start "
            f"it with: chroma run --path DIR --host 127.0.0.1 --port {port}",
            "give --path DIR for an embedded store",
        )


def test_errors_advise_flags_not_python_calls(store, capsys):
    code, _, err = run(capsys, "inspect", MINILM, "--max-tokens", "100000")
    line = one_error(err, "max_tokens")
    assert code == 2 and "contract_for(" not in line
    code, _, err = run(
        capsys, "query", "slugs", "--path", str(store), "--collection", "demo",
        "--query-prefix", "query: ",
    )  # fmt: skip
    line = one_error(err, "ContractMismatchError", "query_prefix", "ctxemb restamp")
    assert code == 2 and "ctxemb_chroma." not in line and "(client" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["query", "slugs"],
        ["verify"],
        ["detect"],
        ["migrate", "--to", "other"],
        ["restamp", "--query-prefix", "query: "],
    ],
    ids=lambda a: a[0],
)
def test_read_only_commands_never_create_a_store(args, store, capsys):
    typo = store.parent / "stor"  # beside the real store
    code, _, err = run(capsys, *args, "--collection", "demo", "--path", str(typo))
    assert code == 2
    one_error(err, f"no Chroma store at {str(typo)!r}", f"did you mean {str(store)!r}?")
    assert not typo.exists()
    empty = store.parent / "empty-folder"
    empty.mkdir(exist_ok=True)
    code, _, err = run(capsys, *args, "--collection", "demo", "--path", str(empty))
    assert code == 2
    one_error(err, "the folder holds no Chroma store")
    assert list(empty.iterdir()) == []


# -- scores are labelled similarities --------------------------------------------------------


def test_query_prints_the_contracts_similarity_labelled(store, capsys):
    target = ["--path", str(store), "--collection", "demo"]
    code, out, err = run(capsys, "query", "slugs in the garden", *target, "-k", "3", "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["metric"] == "cosine similarity" and len(row["results"]) == 3
    # The similarity is the cosine of the query and stored vectors, not Chroma's distance.
    raw = chromadb.PersistentClient(path=str(store)).get_collection("demo", embedding_function=None)
    ids = [r["id"] for r in row["results"]]
    stored = raw.get(ids=ids, include=["embeddings"])
    vectors = dict(zip(stored["ids"], np.asarray(stored["embeddings"]), strict=True))
    query = Embedder(contract_for(MINILM)).embed_query("slugs in the garden")
    for r in row["results"]:
        assert r["similarity"] == pytest.approx(float(vectors[r["id"]] @ query), abs=1e-4)
        assert set(r) == {"id", "similarity", "text"}
    scores = [r["similarity"] for r in row["results"]]
    assert scores == sorted(scores, reverse=True) and ids[0] == "garden-3"

    code, out, _ = run(capsys, "query", "slugs in the garden", *target, "-k", "2")
    assert "(cosine similarity, higher is better)" in out.splitlines()[0]
    first = out.splitlines()[1]
    assert "garden-3" in first and f"similarity {scores[0]:7.4f}" in first


def test_a_rerank_labels_reranker_scores_and_first_stage_similarities(store, capsys):
    target = ["--path", str(store), "--collection", "demo", "--rerank", "maxsim"]
    code, out, _ = run(capsys, "query", "slugs", *target, "--candidates", "6", "-k", "2")
    assert code == 0
    assert "reranker score, higher is better; first stage: cosine similarity" in out
    assert "reranker score" in out.splitlines()[1] and "similarity 0." in out.splitlines()[1]
    code, out, _ = run(capsys, "query", "slugs", *target, "--candidates", "6", "-k", "2", "--json")
    row = json.loads(out)
    assert row["score"] == "reranker" and row["metric"] == "cosine similarity"
    assert len(row["scores"]) == len(row["similarities"]) == 2


def test_the_demo_labels_its_similarities(tmp_path, capsys):
    code, out, err = run(capsys, "demo", "--path", str(tmp_path / "demo"), "--top-k", "1")
    assert code == 0, err
    assert "scores     cosine similarity of each hit, higher is better" in out
    assert re.search(r"-> garden-3 \(0\.\d{3}\)", out)


# -- one truncation note per command -----------------------------------------------------------


def test_truncation_is_one_note_at_the_end_of_a_command(tmp_path, capsys):
    corpus = tmp_path / "long.jsonl"
    texts = ["word " * 40, "short text", "word " * 50, "tiny", "word " * 60]
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    store = ["--path", str(tmp_path / "store"), "--collection", "long"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a TruncationWarning that escapes the CLI fails here
        code, _, err = run(
            capsys, "index", str(corpus), *store, "--max-tokens", "16", "--batch-size", "1",
            "--no-cache",
        )  # fmt: skip
    assert code == 0, err
    notes = [line for line in err.splitlines() if "ctxemb: note:" in line]
    assert len(notes) == 1, err
    found = re.fullmatch(
        r"ctxemb: note: (\d+) texts were longer than max_tokens=16 and were truncated as the "
        r"contract says \(chunk long texts if their ends matter\)",
        notes[0].split("\r")[-1],
    )
    assert found, notes
    # The three long documents, and nothing ctxemb embeds itself (the stamp's canary probes).
    assert int(found[1]) == 3
    assert "TruncationWarning" not in err and "warn(" not in err


# -- clients closed, pipes closed --------------------------------------------------------------


# On the run's server (tests/conftest.py), in a collection no other test names: a server of
# this module's own cost a process (~1 CPU-s) for the two tests below.
SERVER_COLLECTION = fresh_name()


def test_server_commands_close_their_connections(server, capsys):
    target = ["--host", "127.0.0.1", "--port", str(server), "--collection", SERVER_COLLECTION]
    assert main(["index", CORPUS, *target]) == 0
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for args in (["query", "slugs"], ["verify", "--sample", "2"], ["detect", "--sample", "2"]):
            assert main([*args, *target]) in (0, 1), args
        # One full collection for the three: what a command left unreachable stays so until
        # collected (half a CPU-second each in a worker's heap, where torch is loaded).
        gc.collect()
    capsys.readouterr()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []


def test_a_server_query_process_leaves_no_unclosed_socket(server):
    target = ["--host", "127.0.0.1", "--port", str(server), "--collection", SERVER_COLLECTION]
    command = [sys.executable, "-W", "error::ResourceWarning", "-m", "ctxemb_core.cli"]
    done = subprocess.run(
        [*command, "query", "x", *target],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr and "unclosed" not in done.stderr


def test_a_closed_stdout_pipe_ends_quietly():
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxemb_core.cli", "inspect", MINILM],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first line, as after `| head -0`
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err == b""


# -- restamp --------------------------------------------------------------------------------


def test_restamp_accepts_a_query_side_change_deliberately(store, tmp_path, capsys):
    target = ["--path", str(store), "--collection", "restamped"]
    assert main(["index", CORPUS, *target]) == 0
    capsys.readouterr()
    old = contract_for(MINILM)
    code, out, err = run(capsys, "restamp", *target, "--query-prefix", "query: ")
    assert code == 0, err
    new = old.with_(query_prefix="query: ")
    assert out.splitlines()[0] == (
        f"restamped: {old.fingerprint[:12]} -> {new.fingerprint[:12]} (query_only) in Chroma "
        f"{store}"
    )
    assert "  query_prefix: '' -> 'query: '" in out.splitlines()
    # The new query side is the collection's now; the old one is refused.
    code, out, err = run(capsys, "query", "slugs", *target, "--query-prefix", "query: ")
    assert code == 0 and "garden-3" in out, err
    code, out, err = run(capsys, "query", "slugs", *target, "--json")
    assert code == 0 and json.loads(out)["results"], err
    code, _, err = run(capsys, "query", "slugs", *target, "--query-prefix", "")
    assert code == 2
    one_error(err, "ContractMismatchError", "query_prefix")
    code, _, err = run(capsys, "query", "slugs", *target, "--model", MINILM)
    assert code == 2
    one_error(err, "ContractMismatchError", "query_prefix")
    # Again with the same contract: nothing to do. Back with a contract file.
    code, out, _ = run(capsys, "restamp", *target, "--query-prefix", "query: ")
    assert code == 0 and out.startswith("restamped: unchanged")
    file = tmp_path / "old.json"
    file.write_text(old.to_json())
    code, out, err = run(capsys, "restamp", *target, "--contract", str(file))
    assert code == 0, err
    assert f"-> {old.fingerprint[:12]}" in out
    code, _, err = run(capsys, "restamp", *target, "--contract", str(file), "--pooling", "cls")
    assert code == 2
    one_error(err, "--contract and --pooling")


def test_restamp_refuses_a_change_that_needs_re_embedding(store, capsys):
    client = chromadb.PersistentClient(path=str(store))
    before = dict(client.get_collection("demo", embedding_function=None).metadata or {})
    code, _, err = run(
        capsys, "restamp", "--path", str(store), "--collection", "demo", "--truncate-dim", "128"
    )
    assert code == 2
    one_error(err, "ContractMismatchError", "truncate_dim", "ctxemb migrate")
    assert dict(client.get_collection("demo", embedding_function=None).metadata or {}) == before


def test_a_mistyped_collection_name_gets_a_suggestion(store, capsys):
    target = ["--path", str(store), "--collection", "dmeo"]
    for args in (["query", "slugs"], ["query", "slugs", "--model", MINILM], ["verify"]):
        code, _, err = run(capsys, *args, *target)
        assert code == 2, args
        line = one_error(err, "collection 'dmeo' does not exist", "did you mean 'demo'?")
        assert "create=False" not in line
