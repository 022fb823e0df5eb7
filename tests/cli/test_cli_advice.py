"""Advice that fits the caller (issue 43, item 3): every ``ctxemb`` error names only what the
command the user ran can do, and no Python.

Errors carry their next steps as data (``err.remedies``); the command that was run words them
with its own options, its collection and its store. Each test runs ``main([...])`` in-process
on a tiny model built in code and a small embedded store, and checks one line on stderr.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from embedding_server import serving

from ctxemb_core import Embedder, contract_for
from ctxemb_core.cli import main
from ctxemb_core.errors import ConfigurationMismatchError, ContractMismatchError
from ctxemb_core.remedy import Step

DOCS = {
    "tea": "Green tea leaves are steamed or pan-fired soon after picking.",
    "moon": "The moon shows phases as it orbits the earth.",
    "slugs": "Slugs feed at night on young lettuce.",
}
#: Python in a message for the command line: a call (``contract_for(``, ``.with_(``,
#: ``restamp(client``) or an adapter module's name.
PYTHON = re.compile(r"[A-Za-z_][\w.]*\((?!\))|\.with_|ctxemb_(chroma|pgvector)\b")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(err: str, *fragments: str) -> str:
    lines = [line.split("\r")[-1] for line in err.splitlines() if "ctxemb:" in line]
    assert len(lines) == 1 and lines[0].startswith("ctxemb: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not PYTHON.search(lines[0]), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tiny_st_factory) -> Path:
    """A tiny sentence-transformers folder (the session's: its export is built once)."""
    return tiny_st_factory()


@pytest.fixture(autouse=True)
def beside_the_model(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run where the contract's model name (the folder's, ``tiny``) finds the folder, as the
    bundled model's name finds it anywhere: commands that change the stamp's contract read it
    again by that name."""
    monkeypatch.chdir(tiny.parent)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("advice-corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in DOCS.items()))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, tiny: Path, corpus: Path) -> Path:
    """An embedded store whose collection ``docs`` is stamped with the tiny model's contract."""
    path = tmp_path_factory.mktemp("advice-store") / "store"
    target = ["--path", str(path), "--collection", "docs", "--no-cache"]
    assert main(["index", str(corpus), *target, "--model", str(tiny)]) == 0
    return path


def test_a_server_of_another_contract_is_advised_without_options_never_given(store, tiny, capsys):
    # The collection's own contract (no --model, no contract option) asked of a server that
    # serves another pooling: there is no option to drop.
    other = Embedder(contract_for(tiny).with_(pooling="cls"))
    with serving(other) as service:
        code, _, err = run(
            capsys, "query", "tea", "--path", str(store), "--collection", "docs",
            "--url", service.url,
        )  # fmt: skip
    assert code == 2
    line = one_error(err, "ContractMismatchError", "pooling: server='cls', caller='mean'")
    assert "drop --model" not in line.lower() and "contract flags" not in line
    assert "leave out --url" in line
    assert f"ctxemb serve {contract_for(tiny).model} --pooling mean" in line


def test_a_query_side_mismatch_names_the_options_given_and_a_restamp_that_works(store, capsys):
    target = ["--path", str(store), "--collection", "docs"]
    code, _, err = run(capsys, "query", "tea", *target, "--query-prefix", "q: ")
    assert code == 2
    line = one_error(err, "query_prefix: index='', caller='q: '", "Leave out --query-prefix")
    assert "--model" not in line  # not given, not to be dropped
    restamp = re.search(r"ctxemb (restamp [^,]+?)(?:, or |\.$)", line)
    assert restamp, line
    assert f"--path {store}" in restamp.group(1) and "--query-prefix 'q: '" in restamp.group(1)
    assert main(shlex.split(restamp.group(1))) == 0  # the step, run as printed
    assert main(["query", "tea", *target, "--query-prefix", "q: "]) == 0
    assert main(["restamp", *target, "--query-prefix", ""]) == 0  # back as it was
    capsys.readouterr()


def test_a_recipe_mismatch_on_index_says_the_options_that_index_takes(store, corpus, tiny, capsys):
    target = ["--path", str(store), "--collection", "docs"]
    code, _, err = run(
        capsys, "index", str(corpus), *target, "--model", str(tiny), "--pooling", "cls"
    )
    assert code == 2
    line = one_error(err, "pooling: index='mean', caller='cls'")
    # index takes the contract from its options, never from the stamp: it says which to give.
    assert "Give --pooling mean to use the collection's own contract" in line
    assert f"ctxemb migrate --path {store} --collection docs --to '<new name>'" not in line
    assert f"ctxemb migrate --path {store} --collection docs --to <new name> --pooling cls" in line
    assert "Drop" not in line and "leave out" not in line.lower()


def test_the_demo_after_a_restamp_is_advised_in_the_demos_terms(tiny, corpus, tmp_path, capsys):
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"text": "green tea"}) + "\n")
    demo = ["demo", "--model", str(tiny), "--corpus", str(corpus), "--queries", str(queries)]
    demo += ["--path", str(tmp_path / "demo")]
    assert main(demo) == 0
    # The refusals the demo shows advise only what runs: a command line, or an option of the
    # demo's own (it takes no --pooling, --normalize or --query-prefix).
    shown = capsys.readouterr().out.split("opened under other contracts:")[1]
    for advice in re.findall(r"^  (?!contract mismatch|  )(.+)$", shown, re.MULTILINE):
        prose = re.sub(r"ctxemb \w+ [^,]*?(?=, or |\.$|$)", "", advice)
        assert "--" not in prose, advice
    target = ["--collection", "ctxemb-demo", "--path", str(tmp_path / "demo")]
    assert main(["restamp", *target, "--query-prefix", "query: "]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, *demo)
    assert code == 2
    line = one_error(err, "query_prefix: index='query: ', caller=''")
    # Nothing the demo does not take: no contract flags to drop, no --model to leave out.
    assert "contract flags" not in line and "leave out" not in line.lower()
    assert "ctxemb demo" in line and "--collection '<new name>'" not in line
    restore = re.search(r"ctxemb (restamp [^,]+?)(?:, or |\.$)", line)
    assert restore, line
    assert main(shlex.split(restore.group(1))) == 0
    assert main(demo) == 0  # the demo runs again on its collection
    capsys.readouterr()


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "all-MiniLM-L12-v2"],
        ["serve", "all-MiniLM-L12-v2", "--port", "0"],
        ["inspect", "all-MiniLM-L12-v2"],
        ["export", "all-MiniLM-L12-v2", "{tmp}/out"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_mistyped_positional_model_is_advised_as_that_commands_argument(args, tmp_path, capsys):
    args = [a.format(tmp=tmp_path) for a in args]
    code, _, err = run(capsys, *args)
    assert code == 2
    line = one_error(err, "ModelNotFoundError", "nearest known names are 'all-MiniLM-L6-v2'")
    assert "--model" not in line
    meant = " ".join([args[0], "all-MiniLM-L6-v2", *args[2:]])
    assert f"If you meant 'all-MiniLM-L6-v2': ctxemb {meant}." in line


def test_a_mistyped_model_option_is_advised_as_that_option(tmp_path, corpus, capsys):
    code, _, err = run(
        capsys, "index", str(corpus), "--path", str(tmp_path / "s"), "--collection", "d",
        "--model", "all-MiniLM-L6-v3",
    )  # fmt: skip
    assert code == 2
    one_error(err, "If you meant 'all-MiniLM-L6-v2': --model all-MiniLM-L6-v2.")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["query", "tea", "--colection", "docs"],
        ["index", "{corpus}", "--colection", "docs"],
        ["verify", "--colection", "docs"],
        ["restamp", "--colection", "docs", "--query-prefix", "q"],
        ["migrate", "--colection", "docs", "--to", "new"],
        ["detect", "--colection", "docs"],
        ["demo", "--colection", "docs"],
        ["eval", "--colection", "docs"],
        ["query", "tea", "--collection", "docs", "--qurey-prefix", "q"],
        ["serve", "x", "--prot", "8080"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_mistyped_option_is_named_as_unrecognized_with_the_nearest(
    args, corpus, tmp_path, capsys
):
    args = [a.format(corpus=corpus) for a in args]
    typo = next(a for a in args if a.startswith("--") and a not in ("--collection", "--to"))
    meant = {"--colection": "--collection", "--qurey-prefix": "--query-prefix"}
    code, _, err = run(capsys, *args, "--path", str(tmp_path / "s"))
    assert code == 2
    line = one_error(err, "InvalidInputError", f"ctxemb {args[0]}: unrecognized arguments")
    assert typo in line and "required" not in line
    assert f"did you mean {meant.get(typo, '--port')}?" in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("verify", "verify only reads, so nothing was changed"),
        ("query", "query only reads"),
        ("index", "it continues where it stopped"),
        ("migrate", "it continues where it stopped"),
        ("restamp", "the old stamp or the new one"),
    ],
)
def test_an_interrupt_says_what_that_command_leaves(command, says, corpus, monkeypatch, capsys):
    import ctxemb_core.cli.stores as stores

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C as the store is reached

    monkeypatch.setattr(stores, "choose_store", interrupted)
    lead = {"query": ["query", "tea"], "index": ["index", str(corpus)]}.get(command, [command])
    extra = {"restamp": ["--query-prefix", "q"], "migrate": ["--to", "new"]}.get(command, [])
    code, _, err = run(capsys, *lead, "--collection", "docs", *extra)
    assert code == 130
    assert err.strip() == f"ctxemb: error: interrupted; {err.split('interrupted; ')[1].strip()}"
    assert says in err
    if command not in ("index", "migrate"):
        assert "continue" not in err and "index, migrate and eval" not in err


def test_errors_carry_their_remedy_as_data(minilm_contract):
    err = ContractMismatchError(
        minilm_contract, minilm_contract.with_(query_prefix="q: "), stamped=True
    )
    steps = [r.step for r in err.remedies]
    assert steps == [Step.USE_INDEX_CONTRACT, Step.RESTAMP]
    assert err.remedies[1].get("query_prefix") == "q: "  # the caller's, to stamp
    assert err.remedies[0].get("query_prefix") == ""  # the index's, to use
    assert err.remedies[1].to_dict() == {
        "step": "restamp",
        "fields": ["query_prefix"],
        "values": {"query_prefix": "q: "},
    }
    # A store's setting changed around ctxemb: Python may repair it, no command can.
    setting = ConfigurationMismatchError("ctxemb", ("pooling",), "it differs in pooling")
    assert [r.step for r in setting.remedies] == [Step.REPAIR_SETTING]
    assert "repair=True" in str(setting) and "repair=True" not in setting.message_for("cli")


def test_no_cli_message_holds_python(store, corpus, tiny, tmp_path, capsys):
    """Mismatches, typos and refusals across the commands: every line is the command line's."""
    target = ["--path", str(store), "--collection", "docs"]
    fresh = ["--path", str(tmp_path / "fresh"), "--collection", "docs"]
    for args in (
        ["query", "tea", *target, "--pooling", "cls"],
        ["query", "tea", *target, "--truncate-dim", "8"],
        ["verify", *target, "--no-normalize"],
        ["verify", *target, "--query-prefix", "q: "],
        ["index", str(corpus), *target, "--model", str(tiny), "--query-prefix", "q: "],
        ["index", str(corpus), *target, "--model", str(tiny), "--no-normalize"],
        ["restamp", *target, "--pooling", "cls"],
        ["migrate", *target, "--to", "new", "--model", "all-MiniLM-L6-v3"],
        ["detect", *target, "--model", "all-MiniLM-L6-v3"],
        ["eval", "--data", str(tmp_path / "none"), "--model", "all-MiniLM-L6-v3"],
        ["demo", "--model", "all-MiniLM-L6-v3", *fresh[:2]],
        ["serve", "all-MiniLM-L6-v3"],
        ["query", "tea", *fresh],
        # A server's contract changed by options (the server is never reached: refused first).
        ["index", str(corpus), *fresh, "--url", "http://127.0.0.1:9", "--pooling", "cls"],
        ["query", "tea", *target[:2], "--collection", "dcos"],
    ):
        code, _, err = run(capsys, *args)
        assert code == (1 if args[0] == "verify" else 2), (args, err)  # verify: a failed check
        one_error(err)
    assert not (tmp_path / "fresh").exists()


def test_a_hybrid_recipe_mismatch_is_advised_with_the_hybrid_options(
    tiny, corpus, tmp_path, capsys
):
    target = ["--path", str(tmp_path / "store"), "--collection", "docs", "--model", str(tiny)]
    assert main(["index", str(corpus), *target, "--hybrid"]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, "query", "tea", *target, "--hybrid", "--stemmer", "none")
    assert code == 2
    line = one_error(err, "HybridMismatchError", "lexical.stemmer: index='english'")
    assert "Leave out --stemmer" in line and "--rebuild-lexical --stemmer none" in line
    rebuild = re.search(r"ctxemb (index <corpus> [^,]+?)\.$", line)
    assert rebuild, line
    argv = shlex.split(rebuild.group(1).replace("<corpus>", str(corpus)))
    assert main([*argv, "--model", str(tiny)]) == 0  # the step, run as printed
    assert main(["query", "tea", *target, "--hybrid", "--stemmer", "none"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("missing", "args", "flag"),
    [
        ("pgvector", ["query", "tea", "--collection", "docs", "--dsn", "postgresql:///x"], "--dsn"),
        ("pgvector", ["verify", "--collection", "docs", "--schema", "s"], "--schema"),
        ("chroma", ["index", "{corpus}", "--collection", "docs", "--path", "p"], "--path"),
    ],
    ids=lambda a: a if isinstance(a, str) else " ".join(a),
)
def test_an_option_of_a_store_whose_adapter_is_missing_says_what_to_install(
    missing, args, flag, corpus, monkeypatch, capsys
):
    # With only one store's extra installed, another store's option was "unrecognized".
    from ctxemb_core.cli import stores

    monkeypatch.setitem(stores.STORES, missing, "ctxemb_not_installed.cli")
    code, _, err = run(capsys, *[a.format(corpus=corpus) for a in args])
    assert code != 0
    line = one_error(err, "MissingDependencyError", flag, f"pip install 'ctxemb[{missing}]'")
    assert "unrecognized" not in line and "did you mean" not in line


def test_the_cli_knows_each_store_adapters_options_without_importing_it():
    # STORE_FLAGS names each store's options for when its adapter is missing: it must be
    # exactly what the adapter adds.
    import argparse

    from ctxemb_core.cli import stores

    for store in stores.STORES:
        parser = argparse.ArgumentParser()
        stores.store_options(store).add_arguments(parser)
        added = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
        assert added - {"--help"} == set(stores.STORE_FLAGS[store]), store


@pytest.mark.parametrize("rollback", [True, False])
def test_an_interrupted_rollback_is_not_advised_to_be_run_again_blindly(
    rollback, monkeypatch, capsys, tmp_path
):
    # "run the same command again to finish it" was said of every upgrade step; a rollback
    # whose switch had landed when Ctrl-C came would then swap the alias back onto the index
    # the user meant to leave. The advice names the alias and its store, for both.
    import ctxemb_core.cli.stores as stores

    real, calls = stores.choose_store, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # Ctrl-C as the store is reached
        return real(*args, **kwargs)

    monkeypatch.setattr(stores, "choose_store", interrupted)
    store = str(tmp_path / "chroma")
    step = ["--rollback"] if rollback else ["--truncate-dim", "256"]
    code, _, err = run(capsys, "upgrade", "docs", "--path", store, *step)
    assert code == 130 and err.count("\n") == 1
    assert f"--path {store}" in err and "ALIAS" not in err
    if rollback:
        assert f"ctxemb alias show docs --path {store}" in err
        assert "run it again only if it did not" in err and "run the same command" not in err
    else:
        assert "run the same command again to finish it, or ctxemb upgrade docs --path" in err
