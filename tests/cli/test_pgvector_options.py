"""PostgreSQL's options on the command line are never dropped (issue 42, items 14 and 18).

``--schema`` reaches every command's table (index, query, verify, restamp, detect, migrate,
eval); a DSN (``--dsn``, ``$CTXEMB_PG_DSN``) selects PostgreSQL instead of being ignored for
``./chroma``, a DSN beside ``--store chroma`` is refused; each summary names its store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DOCS, MINILM

import ctxemb_pgvector
from ctxemb_core.cli import main

TENANT = {"t1": "Tenants pay rent on the first day of the month.", "t2": "Leases run a year."}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def corpus(folder: Path, docs: dict[str, str], name: str = "corpus.jsonl") -> Path:
    path = folder / name
    path.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in docs.items()))
    return path


def tables(pg, schema: str) -> set[str]:
    rows = pg.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> 'ctxemb_stamps'",
        (schema,),
    )
    return {r[0] for r in rows}


def test_every_command_uses_the_schema_given(pg, tmp_path, capsys, minilm):
    dsn = pg.ctxemb_dsn
    pg.execute("CREATE SCHEMA tenant_x")
    public = ("--store", "pgvector", "--dsn", dsn, "--collection", "docs")
    tenant = (*public, "--schema", "tenant_x")
    assert run(capsys, "index", str(corpus(tmp_path, DOCS)), *public, "--model", MINILM)[0] == 0
    code, out, _ = run(capsys, "index", str(corpus(tmp_path, TENANT, "t.jsonl")), *tenant)
    assert code == 0 and "2 added" in out and "schema tenant_x" in out
    assert tables(pg, "tenant_x") == {"docs"} and tables(pg, "public") == {"docs"}
    assert ctxemb_pgvector.open_table(pg, "docs", minilm, schema="tenant_x").ids() == set(TENANT)

    code, out, _ = run(capsys, "query", *tenant, "--json", "-k", "5", "when is rent due")
    assert code == 0 and {h["id"] for h in json.loads(out)["results"]} == set(TENANT)
    code, out, _ = run(capsys, "verify", *tenant, "--all")
    assert code == 0 and json.loads(out)["sample_size"] == len(TENANT)
    code, out, _ = run(capsys, "restamp", *tenant, "--query-prefix", "q: ")
    assert code == 0 and "schema tenant_x" in out
    assert ctxemb_pgvector.stamped_contract(pg, "docs", "tenant_x").query_prefix == "q: "
    assert ctxemb_pgvector.stamped_contract(pg, "docs").query_prefix == ""  # public untouched
    code, out, _ = run(capsys, "detect", *tenant, "--json")
    assert code == 0 and json.loads(out)["records"] == len(TENANT)
    # Within the database, the copy lands beside its source; --to-schema names another.
    code, out, _ = run(capsys, "migrate", *tenant, "--to", "copy", "--truncate-dim", "128")
    assert code == 0 and tables(pg, "tenant_x") == {"docs", "copy"}
    code, out, _ = run(
        capsys, "migrate", *tenant, "--to", "docs2", "--to-dsn", dsn, "--to-schema", "public"
    )
    assert code == 0 and "docs2: 2 documents in PostgreSQL" in out and "schema public" in out
    assert tables(pg, "public") == {"docs", "docs2"}
    assert ctxemb_pgvector.stamped_contract(pg, "docs2").query_prefix == "q: "


def test_migrate_names_the_target_by_the_target_stores_rules(pg, tmp_path, capsys):
    chroma = ("--path", str(tmp_path / "chroma"), "--collection", "docs")
    assert run(capsys, "index", str(corpus(tmp_path, DOCS)), *chroma, "--model", MINILM)[0] == 0
    # 'd2' is too short for a Chroma collection and a fine PostgreSQL table: the table's rules.
    code, out, err = run(capsys, "migrate", *chroma, "--to", "d2", "--to-dsn", pg.ctxemb_dsn)
    assert code == 0 and "d2: 6 documents in PostgreSQL" in out, err
    # And the other way: a Chroma target is held to Chroma's rules, in Chroma's words.
    pg_docs = ("--dsn", pg.ctxemb_dsn, "--collection", "d2")
    code, out, err = run(
        capsys, "migrate", *pg_docs, "--to", "Bad Name", "--to-path", str(tmp_path / "chroma")
    )
    assert code == 2 and "not one Chroma accepts" in err and "pgvector" not in err, err


def test_a_missing_schema_is_a_named_error(pg, tmp_path, capsys):
    store = ("--store", "pgvector", "--dsn", pg.ctxemb_dsn, "--collection", "docs")
    for args in (("index", str(corpus(tmp_path, DOCS))), ("query", "tea")):
        code, out, err = run(capsys, *args, *store, "--schema", "nope")
        assert code == 2 and out == ""
        assert err.startswith("ctxemb: error: InvalidInputError: ") and "nope" in err, err
        assert "CREATE SCHEMA" in err
    assert tables(pg, "public") == set()


def test_eval_through_pgvector_uses_the_schema(pg, tmp_path, capsys):
    data = tmp_path / "mini"
    (data / "qrels").mkdir(parents=True)
    corpus(data, DOCS)
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "green tea"}))
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ttea\t1\n")
    pg.execute("CREATE SCHEMA tenant_x")
    code, out, err = run(
        capsys, "eval", "--data", str(data), "--dsn", pg.ctxemb_dsn, "--schema", "tenant_x",
        "--collection", "mini", "--exact", "--k", "3",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["via"] == "pgvector" and result["store"]["schema"] == "tenant_x"
    assert tables(pg, "tenant_x") == {"mini"} and tables(pg, "public") == set()


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_dsn_selects_postgresql_and_no_chroma_folder_is_made(
    pg, tmp_path, capsys, monkeypatch, how
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXEMB_PG_DSN", raising=False)
    given: tuple[str, ...] = ("--dsn", pg.ctxemb_dsn)
    if how == "environment":
        monkeypatch.setenv("CTXEMB_PG_DSN", pg.ctxemb_dsn)
        given = ()
    path = corpus(tmp_path, DOCS)
    code, out, _ = run(
        capsys, "index", str(path), *given, "--collection", "docs", "--model", MINILM
    )
    assert code == 0 and "in PostgreSQL" in out
    assert not (tmp_path / "chroma").exists() and tables(pg, "public") == {"docs"}
    code, out, _ = run(capsys, "query", *given, "--collection", "docs", "green tea", "-k", "1")
    assert code == 0 and "from PostgreSQL" in out and "tea" in out


def test_a_dsn_to_nowhere_is_not_answered_from_chroma(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chroma").mkdir()  # a Chroma store that must not answer instead
    dsn = "postgresql://me@127.0.0.1:1/rag"
    code, out, err = run(capsys, "query", "--dsn", dsn, "--collection", "docs", "tea")
    assert code == 2 and out == "" and "StoreUnavailableError" in err and "127.0.0.1" in err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--store", "chroma", "--dsn", "postgresql://x/y"), "--dsn is a PostgreSQL option"),
        (("--store", "chroma", "--schema", "s"), "--schema is a PostgreSQL option"),
        (("--dsn", "postgresql://x/y", "--path", "./c"), "name two stores"),
        (("--store", "pgvector", "--host", "h"), "--host is a Chroma option"),
    ],
)
def test_options_of_two_stores_are_refused_before_anything_is_made(
    args, said, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "index", str(corpus(tmp_path, DOCS)), "--collection", "d", *args)
    assert code == 2 and out == "" and said in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]


def test_migrate_target_options_select_the_target_store(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = ("migrate", "--collection", "d", "--to", "e")
    code, _, err = run(capsys, *base, "--to-store", "chroma", "--to-dsn", "postgresql://x/y")
    assert code == 2 and "--to-dsn is a PostgreSQL option" in err
    code, _, err = run(capsys, *base, "--to-dsn", "postgresql://x/y", "--to-path", "p")
    assert code == 2 and "name two target stores" in err


def test_the_chroma_summaries_name_their_store(tmp_path, capsys, minilm):
    store = ("--collection", "docs", "--path", str(tmp_path / "c"))
    code, out, _ = run(capsys, "index", str(corpus(tmp_path, DOCS)), *store, "--model", MINILM)
    assert code == 0 and f"in Chroma {tmp_path / 'c'}" in out
    code, out, _ = run(capsys, "query", *store, "tea", "-k", "1")
    assert code == 0 and f"from Chroma {tmp_path / 'c'}" in out
