"""The ctxemb command answers every user mistake with one line, exit code 2, and no change.

Each bad invocation runs ``main([...])`` in-process against a real embedded Chroma store (and a
few against a real Chroma server) and checks the exit code, that stderr is exactly one
``ctxemb: error:`` line without a traceback, and that nothing on disk or in the store changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chroma_server import chroma_server, free_port

from ctxemb_core import demo as demo_data
from ctxemb_core.cli import main

CORPUS = str(demo_data.corpus_path())
N_DOCS = 24


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_error_line(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ctxemb: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)


def snapshot(client: chromadb.api.ClientAPI) -> dict[str, tuple[int, list[str], dict]]:
    """Every collection's count, ids and metadata: what a failed command must leave alone."""
    out = {}
    for c in client.list_collections():
        raw = client.get_collection(c.name, embedding_function=None)
        out[c.name] = (raw.count(), sorted(raw.get(include=[])["ids"]), dict(raw.metadata or {}))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded store holding the example corpus in the stamped collection ``demo``."""
    path = tmp_path_factory.mktemp("cli-errors") / "store"
    assert main(["index", CORPUS, "--path", str(path), "--collection", "demo"]) == 0
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """User files that are wrong in each way a user gets them wrong."""
    root = tmp_path_factory.mktemp("cli-files")
    made = {
        "empty": root / "empty.jsonl",
        "blank": root / "blank.jsonl",
        "malformed": root / "malformed.jsonl",
        "no_text": root / "no_text.jsonl",
        "file": root / "a-file",
        "queries": root / "queries.jsonl",
    }
    made["empty"].write_text("")
    made["blank"].write_text("\n\n")
    made["malformed"].write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": \n')
    made["no_text"].write_text('{"_id": "a", "title": "only a title"}\n')
    made["file"].write_text("not a folder")
    made["queries"].write_text('{"text": "fine"}\n["not", "an", "object"]\n')
    beir = root / "beir-empty"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("")
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "a question"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    made["beir_empty"] = beir
    one = root / "beir-one"
    (one / "qrels").mkdir(parents=True)
    (one / "corpus.jsonl").write_text('{"_id": "d1", "text": "Slugs eat lettuce."}\n')
    (one / "queries.jsonl").write_text('{"_id": "q1", "text": "what eats lettuce"}\n')
    (one / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    made["beir_one"] = one
    made["missing"] = root / "missing.jsonl"
    return made


# Bad invocations on a store folder that does not exist yet: each must exit 2 with one line and
# leave the folder uncreated. ``{fresh}`` is that folder, ``{name}`` a file from ``files``.
FRESH = [
    (["index", CORPUS, "--batch-size", "0"], "argument --batch-size"),
    (["index", CORPUS, "--batch-size", "-2"], "argument --batch-size"),
    (["index", CORPUS, "--batch-size", "many"], "argument --batch-size"),
    (["index", CORPUS, "--sample", "-1"], "argument --sample"),
    (["index", CORPUS, "--port", "70000"], "argument --port"),
    (["index", CORPUS, "--store", "nosuch"], "argument --store"),
    (["index", "{empty}"], "no documents"),
    (["index", "{blank}"], "no documents"),
    (["index", "{missing}"], "missing file"),
    (["index", "{malformed}"], "invalid JSON"),
    (["index", "{no_text}"], "no string 'text'"),
    (["index", "{beir_empty}"], "no documents"),
    (["index", "{beir_empty}/qrels"], "holds no corpus.jsonl"),
    (["index", CORPUS, "--pooling", "average"], "invalid choice: 'average' (choose from 'cls'"),
    (["index", CORPUS, "--family", "e6"], "invalid choice: 'e6' (choose from 'e5'"),
    (["index", CORPUS, "--precision", "float64"], "(choose from 'float32'"),
    (
        ["index", CORPUS, "--quantization", "int4"],
        "(choose from 'int8-dynamic', 'int8-dynamic-pc-v1')",
    ),
    (["index", CORPUS, "--max-tokens", "0"], "max_tokens"),
    (["index", CORPUS, "--max-tokens", "-3"], "max_tokens"),
    (["index", CORPUS, "--truncate-dim", "0"], "truncate_dim"),
    (["index", CORPUS, "--model", "{missing}"], "ModelNotFoundError"),
    (["query", "slugs", "-k", "0"], "argument -k/--top-k"),
    (["query", "slugs"], "no Chroma store at"),
    (["verify"], "no Chroma store at"),
    (["detect"], "no Chroma store at"),
    (["restamp", "--query-prefix", "q: "], "no Chroma store at"),
    (["verify", "--sample", "-1"], "argument --sample"),
    (["verify", "--all", "--sample", "3"], "not allowed with"),
    (["migrate", "--to", "other"], "no Chroma store at"),
    (["migrate", "--to", "other", "--batch-size", "0"], "argument --batch-size"),
    (["migrate", "--to", "demo"], "never modifies the source"),
    (["eval", "--data", "{missing}"], "not found"),
    (["eval", "--data", "{beir_empty}"], "no documents"),
    (["demo", "--corpus", "{empty}"], "no documents"),
    (["demo", "--queries", "{queries}"], "queries.jsonl:2"),
    (["demo", "--queries", "{missing}"], "FileNotFoundError"),
    (["demo", "--top-k", "0"], "argument --top-k"),
]


@pytest.mark.parametrize(("args", "fragment"), FRESH, ids=[" ".join(a) for a, _ in FRESH])
def test_bad_invocations_exit_2_with_one_line_and_create_nothing(
    args, fragment, files, tmp_path, capsys
):
    fresh = tmp_path / "fresh"
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    store = ["--path", str(fresh)]
    if args[0] in ("index", "query", "verify", "migrate", "detect", "restamp"):
        store += ["--collection", "demo"]
    code, out, err = run(capsys, *args, *store)
    assert code == 2, (out, err)
    assert_one_error_line(err, fragment)
    assert not fresh.exists()


@pytest.mark.parametrize(
    ("where", "fragment"), [("{file}", "is a file"), ("{file}/store", "a-file/store")]
)
@pytest.mark.parametrize("command", ["index", "eval", "demo"])
def test_a_store_path_that_cannot_be_used_is_refused(command, where, fragment, files, capsys):
    before = files["file"].read_bytes()
    lead = {
        "index": ["index", CORPUS, "--collection", "demo"],
        "eval": ["eval", "--data", str(files["beir_one"])],
        "demo": ["demo"],
    }[command]
    code, _, err = run(capsys, *lead, "--path", where.format(file=files["file"]))
    assert code == 2
    assert_one_error_line(err, "StoreUnavailableError", fragment)
    assert files["file"].is_file() and files["file"].read_bytes() == before


# Bad invocations against the stamped collection ``demo`` of an existing store: the store must be
# exactly as it was (collections, counts, ids, stamps).
EXISTING = [
    (["index", CORPUS, "--collection", "demo", "--batch-size", "-2"], "argument --batch-size"),
    (["index", CORPUS, "--collection", "demo", "--pooling", "cls"], "ContractMismatchError"),
    (["index", CORPUS, "--collection", "demo", "--max-tokens", "0"], "max_tokens"),
    (["index", CORPUS, "--collection", "x"], "InvalidInputError"),
    (["index", CORPUS, "--collection", "no spaces allowed"], "InvalidInputError"),
    (["query", "slugs", "--collection", "demo", "-k", "0"], "argument -k/--top-k"),
    (["query", "slugs", "--collection", "demo", "--max-tokens", "0"], "max_tokens"),
    (["query", "slugs", "--collection", "nothing-here"], "does not exist"),
    (["verify", "--collection", "nothing-here"], "does not exist"),
    (["migrate", "--collection", "demo", "--to", "demo"], "never modifies the source"),
    (["migrate", "--collection", "nothing-here", "--to", "other"], "does not exist"),
    (["migrate", "--collection", "demo", "--to", "no spaces allowed"], "InvalidInputError"),
    (["migrate", "--collection", "demo", "--to", "other", "--pooling", "mode"], "invalid choice"),
    (["restamp", "--collection", "demo", "--pooling", "cls"], "ContractMismatchError"),
    (["restamp", "--collection", "demo"], "needs the new contract"),
]


@pytest.mark.parametrize(("args", "fragment"), EXISTING, ids=[" ".join(a) for a, _ in EXISTING])
def test_bad_invocations_on_an_existing_store_change_nothing(args, fragment, store, capsys):
    client = chromadb.PersistentClient(path=str(store))
    before = snapshot(client)
    code, out, err = run(capsys, *args, "--path", str(store))
    assert code == 2, (out, err)
    assert_one_error_line(err, fragment)
    assert snapshot(client) == before


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "required: COMMAND"),
        (["nosuch"], "invalid choice: 'nosuch'"),
        (["index", "--collection", "demo"], "required: data"),
        (["query", "--collection", "demo"], "required: text"),
        (["inspect", "--truncate-dim", "half"], "argument --truncate-dim"),
    ],
)
def test_usage_errors_are_one_line_naming_the_argument(args, fragment, capsys):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert_one_error_line(err, "InvalidInputError", fragment, "--help")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["index", CORPUS, "--truncate-dim", "9999"], "argument --truncate-dim: truncate_dim=9999"),
        (["index", CORPUS, "--max-tokens", "0"], "argument --max-tokens: max_tokens must be"),
        (
            ["index", CORPUS, "--max-tokens", "9999"],
            "argument --max-tokens: max_tokens=9999 exceeds",
        ),
        (["index", CORPUS, "--layers", "bogus"], "argument --layers: layers='bogus' is not valid"),
    ],
)
def test_a_refused_contract_value_is_said_of_the_option_that_gave_it(args, said, tmp_path, capsys):
    # The contract's own check names its field (truncate_dim=); on the command line it is also
    # said of the option typed, as argparse says its own, and never advises Python's None.
    fresh = tmp_path / "fresh"
    code, _, err = run(capsys, *args, "--path", str(fresh), "--collection", "demo")
    assert code == 2
    assert_one_error_line(err, "InvalidContractError", said)
    assert "None" not in err
    assert not fresh.exists()
    # ctxemb inspect, which takes no store: the same words.
    code, _, err = run(capsys, "inspect", "sentence-transformers/all-MiniLM-L6-v2", *args[2:])
    assert code == 2
    assert_one_error_line(err, "InvalidContractError", said)


def test_a_contract_mismatch_is_one_line_that_still_names_each_field(store, capsys):
    code, _, err = run(
        capsys, "query", "slugs", "--path", str(store), "--collection", "demo", "--no-normalize"
    )
    assert code == 2
    assert_one_error_line(err, "ContractMismatchError", "normalize: index=True, caller=False")


def test_help_exits_0_in_process(capsys):
    code, out, err = run(capsys, "verify", "--help")
    assert code == 0 and err == ""
    # The description says what verify checks and what it cannot.
    text = " ".join(out.split())
    assert "--all" in text and "cannot be re-embedded" in text and "Not checked:" in text


def _tamper(store: Path, collection: str) -> str:
    """Overwrite one stored vector around ctxemb, as a raw client with another model would."""
    raw = chromadb.PersistentClient(path=str(store)).get_collection(
        collection, embedding_function=None
    )
    got = raw.get(include=["embeddings"])
    victim = got["ids"][len(got["ids"]) // 2]
    vector = np.random.default_rng(0).standard_normal(len(got["embeddings"][0]))
    raw.update(ids=[victim], embeddings=[(vector / np.linalg.norm(vector)).tolist()])
    return victim


def test_verify_all_finds_what_a_sample_of_zero_does_not_check(tmp_path, capsys):
    path = str(tmp_path / "store")
    assert main(["index", CORPUS, "--path", path, "--collection", "demo"]) == 0
    victim = _tamper(tmp_path / "store", "demo")
    capsys.readouterr()

    code, out, _ = run(capsys, "verify", "--path", path, "--collection", "demo", "--sample", "0")
    canary_only = json.loads(out)
    assert code == 0 and canary_only["sample_size"] == 0 and canary_only["canary_cosine"] > 0.9999

    code, out, err = run(capsys, "verify", "--path", path, "--collection", "demo", "--all")
    report = json.loads(out)  # stdout is the JSON report alone; progress goes to stderr
    assert code == 1 and not report["ok"]
    assert report["bad_ids"] == [victim] and report["sample_size"] == N_DOCS
    assert report["mode"] == "all" and not any("records:" in n for n in report["not_checked"])
    # One line on stderr (beside the progress bar) names what failed.
    said = [line.split("\r")[-1] for line in err.splitlines() if "ctxemb:" in line]
    assert len(said) == 1 and said[0].startswith("ctxemb: error: verify failed: 1 of 24")
    assert victim in said[0] and "Traceback" not in err


def test_the_open_sample_is_the_users(tmp_path, capsys):
    path = str(tmp_path / "store")
    assert main(["index", CORPUS, "--path", path, "--collection", "demo"]) == 0
    victim = _tamper(tmp_path / "store", "demo")
    capsys.readouterr()
    query = ["query", "slugs", "--path", path, "--collection", "demo", "--json"]

    # Every record sampled on open: the foreign vector is found and nothing is returned.
    code, out, err = run(capsys, *query, "--sample", str(N_DOCS))
    assert code == 2 and out == ""
    assert_one_error_line(err, "ForeignVectorsError", victim)
    # Canary only: the open passes and the query answers.
    code, out, err = run(capsys, *query, "--sample", "0")
    assert code == 0, err
    assert len(json.loads(out)["results"]) == 5
    # index opens the collection too, under the same rule.
    code, _, err = run(
        capsys, "index", CORPUS, "--path", path, "--collection", "demo", "--sample", str(N_DOCS)
    )
    assert code == 2
    assert_one_error_line(err, "ForeignVectorsError")


def test_an_unreachable_server_is_one_line(capsys):
    port = str(free_port())  # nothing listens there
    for args in (
        ["query", "slugs", "--collection", "demo"],
        ["index", CORPUS, "--collection", "demo"],
        ["verify", "--collection", "demo"],
    ):
        code, _, err = run(capsys, *args, "--host", "127.0.0.1", "--port", port)
        assert code == 2
        assert_one_error_line(err, "StoreUnavailableError")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with chroma_server(tmp_path_factory.mktemp("cli-errors-server") / "data") as port:
        yield port


def test_a_server_refuses_bad_invocations_and_keeps_its_collections(server, capsys):
    store = ["--host", "127.0.0.1", "--port", str(server)]
    assert main(["index", CORPUS, *store, "--collection", "demo"]) == 0
    client = chromadb.HttpClient(host="127.0.0.1", port=server)
    before = snapshot(client)
    capsys.readouterr()
    for args, fragment in [
        (["index", CORPUS, "--collection", "x"], "InvalidInputError"),
        (["index", CORPUS, "--collection", "demo", "--batch-size", "0"], "--batch-size"),
        (["index", CORPUS, "--collection", "demo", "--pooling", "cls"], "ContractMismatchError"),
        (["query", "slugs", "--collection", "nothing-here"], "does not exist"),
        (["migrate", "--collection", "demo", "--to", "no spaces allowed"], "InvalidInputError"),
    ]:
        code, _, err = run(capsys, *args, *store)
        assert code == 2, (args, err)
        assert_one_error_line(err, fragment)
        assert snapshot(client) == before, args
    code, out, _ = run(capsys, "verify", *store, "--collection", "demo", "--all")
    assert code == 0 and json.loads(out)["sample_size"] == N_DOCS


@pytest.mark.parametrize(
    "args",
    [
        ["index", CORPUS, "--collection", "a!"],
        ["index", CORPUS, "--collection", "x"],
        ["demo", "--collection", "bad name"],
    ],
)
def test_a_collection_name_chroma_refuses_creates_no_store(args, tmp_path, capsys):
    fresh = tmp_path / "fresh"
    code, out, err = run(capsys, *args, "--path", str(fresh))
    assert code == 2, (out, err)
    assert_one_error_line(err, "collection name")
    assert not fresh.exists()
