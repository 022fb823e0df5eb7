"""``ctxemb alias`` and ``ctxemb upgrade`` on a real store (issue 45): an alias created over an
indexed collection, upgraded to another contract (backfill, gates, cutover), rolled back and its
previous index retired; bad input refused with nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DOCS, MINILM

from ctxemb_core.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    return path


@pytest.fixture
def store(request, tmp_path) -> tuple[str, ...]:
    """The store a test names (``chroma`` or ``pgvector``, by its ``store`` parameter): each
    command runs on one, the other store's session is docs/upgrade.md's (Chroma) or another
    test's, so that the two stores cost one run of each flow."""
    if request.param == "chroma":
        return ("--path", str(tmp_path / "chroma"))
    pg = request.getfixturevalue("pg")
    return ("--store", "pgvector", "--dsn", pg.ctxemb_dsn)


@pytest.mark.parametrize("store", ["pgvector"], indirect=True)
def test_an_alias_upgraded_rolled_back_and_retired(store, corpus, capsys, tmp_path):
    first = "docs-v1" if "--path" in store else "docs_v1"
    assert (
        run(capsys, "index", str(corpus), *store, "--collection", first, "--model", MINILM)[0] == 0
    )
    code, out, _ = run(capsys, "alias", "create", "docs", "--collection", first, *store)
    assert code == 0 and "alias docs: serving, generation 1" in out

    code, out, _ = run(capsys, "upgrade", "docs", *store, "--truncate-dim", "256", "--dry-run")
    assert code == 0 and f"{len(DOCS)} documents to re-embed" in out
    assert json.loads(run(capsys, "alias", "show", "docs", *store, "--json")[1])["generation"] == 1

    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "q1", "text": "how is green tea made"}))
    code, out, err = run(
        capsys, "upgrade", "docs", *store, "--truncate-dim", "256", "--gate", str(queries)
    )
    assert code == 0, err
    assert "pass  parity: 0 records differ" in out and "pass  quality: top-10 overlap" in out
    shown = json.loads(run(capsys, "alias", "show", "docs", *store, "--json")[1])
    assert shown["state"] == "serving" and shown["previous"]["index"] == first
    code, out, _ = run(capsys, "upgrade", "docs", *store, "--truncate-dim", "256")
    assert code == 0 and "already upgraded" in out  # the same command again: done
    assert shown["target"]["contract"]["truncate_dim"] == 256

    code, out, _ = run(capsys, "query", *store, "--collection", shown["target"]["index"], "tea")
    assert code == 0
    code, out, err = run(capsys, "upgrade", "docs", *store, "--rollback")
    assert code == 0 and f"target:   {first}" in out
    code, out, err = run(capsys, "upgrade", "docs", *store, "--retire")
    assert code == 0 and "previous" not in out
    code, out, _ = run(capsys, "alias", "list", *store)
    assert code == 0 and out.startswith(f"docs -> {first}")


@pytest.mark.parametrize("store", ["chroma"], indirect=True)
def test_upgrade_refusals_change_nothing(store, corpus, capsys, tmp_path):
    first = "docs-v1" if "--path" in store else "docs_v1"
    assert (
        run(capsys, "index", str(corpus), *store, "--collection", first, "--model", MINILM)[0] == 0
    )
    code, _, err = run(capsys, "upgrade", "nope", *store, "--truncate-dim", "256")
    assert code == 2 and "no alias 'nope'" in err
    code, _, err = run(capsys, "alias", "create", first, "--collection", first, *store)
    assert code == 2 and "name of an index" in err
    assert run(capsys, "alias", "create", "docs", "--collection", first, *store)[0] == 0
    code, _, err = run(capsys, "upgrade", "docs", *store, "--to", MINILM)
    assert code == 2 and "already serves this contract" in err
    bad = tmp_path / "gate.jsonl"
    bad.write_text("{not json")
    code, _, err = run(
        capsys, "upgrade", "docs", *store, "--truncate-dim", "256", "--gate", str(bad)
    )
    assert code == 2 and "--gate" in err
    for where, said in (("{set", "not JSON"), ('["set"]', "JSON object")):
        code, _, err = run(
            capsys,
            "upgrade",
            "docs",
            *store,
            "--truncate-dim",
            "256",
            "--gate",
            str(bad),
            "--gate-where",
            where,
        )
        assert code == 2 and said in err, err
    code, _, err = run(capsys, "upgrade", "docs", *store, "--gate-where", '{"set": "eval"}')
    assert code == 2 and "--gate-where needs --gate" in err
    code, _, err = run(capsys, "upgrade", "docs", *store, "--retire")
    assert code == 2 and "no previous target" in err
    # A restamp would change the contract under the alias's readers: through the alias only.
    code, _, err = run(capsys, "restamp", "--collection", first, *store, "--query-prefix", "q: ")
    assert code == 2 and "alias 'docs' (target) holds it" in err, err
    shown = json.loads(run(capsys, "alias", "show", "docs", *store, "--json")[1])
    assert shown["generation"] == 1 and shown["shadow"] is None


@pytest.mark.parametrize("store", ["pgvector"], indirect=True)
def test_index_and_query_by_alias_follow_an_upgrade(store, corpus, capsys, tmp_path):
    first = "docs-v1" if "--path" in store else "docs_v1"
    assert (
        run(capsys, "index", str(corpus), *store, "--collection", first, "--model", MINILM)[0] == 0
    )
    assert run(capsys, "alias", "create", "docs", "--collection", first, *store)[0] == 0
    code, out, err = run(capsys, "upgrade", "docs", *store, "--truncate-dim", "256", "--no-cutover")
    assert code == 0 and "still upgrading" in out, err
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"_id": "late", "text": "Oolong tea is partly oxidised."}))
    code, out, err = run(capsys, "index", str(more), *store, "--alias", "docs")
    assert code == 0 and "alias docs wrote every change to" in out, err
    shown = json.loads(run(capsys, "alias", "show", "docs", *store, "--json")[1])
    code, out, _ = run(capsys, "query", "oolong", *store, "--alias", "docs", "--json")
    assert code == 0 and json.loads(out)["results"][0]["id"] == "late"
    code, out, _ = run(capsys, "query", "oolong", *store, "--collection", shown["shadow"]["index"])
    assert code == 0 and "late" in out  # the write reached the shadow too
    code, out, err = run(capsys, "upgrade", "docs", *store)  # a re-run finishes: cutover
    assert code == 0, err
    code, out, _ = run(capsys, "query", "oolong", *store, "--alias", "docs", "--json")
    assert code == 0 and json.loads(out)["results"][0]["id"] == "late"
    code, _, err = run(capsys, "query", "oolong", *store)
    assert code == 2 and "--alias" in err
    # ctxemb restamp refuses the alias's target (the change would move under its readers)...
    target = json.loads(run(capsys, "alias", "show", "docs", *store, "--json")[1])["target"]
    restamp = ("restamp", "--collection", target["index"], *store, "--query-prefix", "q: ")
    code, _, err = run(capsys, *restamp)
    assert code == 2 and "alias 'docs' (target) holds it" in err, err
    # ...and an index restamped behind the alias all the same (core's restamp_index, no alias
    # check) no longer has the contract the alias records: a reader by alias is refused.
    _restamp_around(store, target["index"], "q: ")
    code, _, err = run(capsys, "query", "oolong", *store, "--alias", "docs")
    assert code == 2 and "ContractMismatchError" in err and "query_prefix" in err, err


def _restamp_around(store: tuple[str, ...], index: str, prefix: str) -> None:
    """Re-stamp ``index`` with a query prefix through core's driver-level call, around the
    adapter's alias check (as a second tool or an older ctxemb would)."""
    from ctxemb_core.index import restamp_index, stamped_contract

    if "--path" in store:
        import ctxemb_chroma

        driver = ctxemb_chroma.ChromaDriver(ctxemb_chroma.connect(path=store[1]), index)
    else:
        import ctxemb_pgvector

        driver = ctxemb_pgvector.PgvectorDriver(ctxemb_pgvector.connect(store[-1]), index)
    restamp_index(driver, stamped_contract(driver).with_(query_prefix=prefix))
