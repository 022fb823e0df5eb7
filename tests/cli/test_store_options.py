"""The CLI's store options are taken whole or refused: ``--port`` without ``--host``, ``--host``
with ``--path``; and the demo's follow-up commands reach the demo's store (``./ctxemb-demo-chroma``,
not the other commands' default ``./chroma``), through the real ``ctxemb`` entry point."""

from __future__ import annotations

import shlex

import pytest

from ctxemb_core import demo as demo_data
from ctxemb_core.cli import main

CORPUS = str(demo_data.corpus_path())


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str, *parts: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxemb: error: InvalidInputError: "), err
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


COMMANDS = [
    ["index", CORPUS],
    ["query", "slugs"],
    ["verify"],
    ["detect"],
    ["migrate", "--to", "other"],
    ["restamp", "--query-prefix", "q: "],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_port_without_a_host_is_refused_and_nothing_is_created(
    args, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *args, "--collection", "docs", "--port", "8123")
    assert code == 2 and out == ""
    one_error(err, "--port 8123 needs --host", "--host 127.0.0.1 --port 8123")
    assert list(tmp_path.iterdir()) == []  # no ./chroma made in its place


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_host_with_a_path_is_refused_and_nothing_is_created(args, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [*args, "--collection", "docs", "--host", "127.0.0.1", "--path", "./mine"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    one_error(err, "--host 127.0.0.1 and --path ./mine name two stores")
    assert list(tmp_path.iterdir()) == []


def test_the_ray_index_refuses_a_path_beside_its_host(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["index", CORPUS, "--collection", "docs", "--ray", "--host", "h", "--path", "x"]
    code, _, err = run(capsys, *argv)
    assert code == 2
    one_error(err, "name two stores")


def test_the_ray_index_refuses_a_store_that_is_one_process_s(tmp_path, monkeypatch, capsys):
    # Every actor reopens the store on its own node: an embedded Chroma folder is one
    # process's, and Qdrant's adapter gives no Ray session (its local mode is one process's).
    monkeypatch.chdir(tmp_path)
    argv = ["index", CORPUS, "--collection", "docs", "--ray"]
    code, _, err = run(capsys, *argv)
    assert code == 2
    one_error(err, "--ray writes to a Chroma server every actor can reach: give --host")
    code, _, err = run(capsys, *argv, "--store", "qdrant")
    assert code == 2
    one_error(err, "--ray cannot write to the qdrant store")
    assert list(tmp_path.iterdir()) == []


def test_a_host_alone_uses_port_8000(tmp_path, monkeypatch, capsys):
    # No server there: the error names the address tried, with the default port filled in.
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "verify", "--collection", "docs", "--host", "127.0.0.9")
    assert code == 2
    assert "127.0.0.9:8000" in err
    assert list(tmp_path.iterdir()) == []


def test_the_demo_prints_follow_ups_that_reach_its_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "demo")
    assert code == 0, err
    assert (tmp_path / "ctxemb-demo-chroma" / "chroma.sqlite3").is_file()
    follow = [line.strip() for line in out.splitlines() if line.strip().startswith("ctxemb ")]
    assert [shlex.split(f)[1] for f in follow] == ["query", "verify"]
    for line in follow:
        argv = shlex.split(line)[1:]
        assert argv[-4:] == ["--collection", "ctxemb-demo", "--path", "./ctxemb-demo-chroma"]
        code, out, err = run(capsys, *argv)
        assert code == 0, (line, err)
    assert not (tmp_path / "chroma").exists()


def test_the_demo_on_its_own_path_prints_that_path(tmp_path, capsys):
    where = tmp_path / "my demo"
    code, out, err = run(capsys, "demo", "--path", str(where))
    assert code == 0, err
    assert f"--path {shlex.quote(str(where))}" in out


def test_the_demo_refuses_a_host_with_a_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "demo", "--host", "127.0.0.1", "--path", "x")
    assert code == 2
    one_error(err, "name two stores")
    assert list(tmp_path.iterdir()) == []


def test_after_the_demo_the_default_path_names_the_demo_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "demo")[0] == 0
    # No ./chroma at all: the store beside it that holds the collection is named.
    code, _, err = run(capsys, "query", "green tea", "--collection", "ctxemb-demo")
    assert code == 2
    one_error(err, "no Chroma store at 'chroma'", "did you mean 'ctxemb-demo-chroma'?")
    assert "'ctxemb-demo'" in err
    assert not (tmp_path / "chroma").exists()
    # A ./chroma of the user's own, without that collection: the demo's store is named.
    assert run(capsys, "index", CORPUS, "--collection", "docs")[0] == 0
    for argv in (["query", "green tea"], ["verify"], ["detect"]):
        code, _, err = run(capsys, *argv, "--collection", "ctxemb-demo")
        assert code == 2
        one_error(
            err,
            "collection 'ctxemb-demo' does not exist in 'chroma'",
            "the store at 'ctxemb-demo-chroma' holds a collection 'ctxemb-demo'",
            "give --path ctxemb-demo-chroma",
        )


def test_the_python_error_names_the_neighbouring_store(minilm, tmp_path, monkeypatch):
    from ctxemb_chroma import connect, open_collection
    from ctxemb_core.errors import InvalidInputError

    monkeypatch.chdir(tmp_path)
    open_collection(connect("./demo-store"), "demo", minilm).add(["tea"], ["Green tea."])
    mine = connect("./chroma")
    with pytest.raises(InvalidInputError, match=r"connect\('demo-store'\) to use it"):
        open_collection(mine, "demo", minilm, create=False)
