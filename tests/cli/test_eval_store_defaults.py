"""``ctxemb eval`` takes each store's defaults from its adapter (issue 44, item 6).

The store options of ``eval`` (``--path``, ``--host``, ``--port``, ``--dsn``, ``--schema``) are
filled in by the store adapter's own :class:`~ctxemb_core.cli.stores.StoreOptions`, as for every
other command: no second copy of ``./chroma``, port 8000 or ``$CTXEMB_PG_DSN`` in the command.
Each test changes an adapter's default and watches ``eval`` follow it; the refusals come before
anything is indexed, so nothing here embeds a corpus.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxemb_core.cli import main, stores


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    """A one-document BEIR folder."""
    one = tmp_path / "beir-one"
    (one / "qrels").mkdir(parents=True)
    (one / "corpus.jsonl").write_text('{"_id": "d1", "text": "Slugs eat lettuce."}\n')
    (one / "queries.jsonl").write_text('{"_id": "q1", "text": "what eats lettuce"}\n')
    (one / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return one


def test_evals_help_shows_the_adapters_defaults(capsys, monkeypatch):
    # Each adapter's defaults() are the words of what its check fills in ...
    for store in stores.STORES:
        shown = stores.store_options(store).defaults()
        if store == "chroma":
            embedded = stores.store_filled(store, path=None, host=None, port=None)
            server = stores.store_filled(store, path=None, host="127.0.0.1", port=None)
            assert (embedded.path, str(server.port)) == (shown["path"], shown["port"])
        elif store == "qdrant":
            filled = stores.store_filled(store, qdrant_path=None, qdrant_url=None)
            assert filled.qdrant_path == shown["qdrant_path"]
        else:
            filled = stores.store_filled(store, dsn="postgresql://someone@/db", schema=None)
            assert filled.schema == shown["schema"]
    # ... and eval's help shows them, whatever they are.
    import ctxemb_chroma.cli
    import ctxemb_pgvector.cli
    import ctxemb_qdrant.cli

    monkeypatch.setattr(ctxemb_chroma.cli, "DEFAULT_PATH", "./elsewhere")
    monkeypatch.setattr(ctxemb_qdrant.cli, "DEFAULT_PATH", "./qdrant-elsewhere")
    monkeypatch.setattr(ctxemb_chroma.cli, "DEFAULT_PORT", 8123)
    monkeypatch.setattr(ctxemb_pgvector.cli, "DSN_ENV", "CTXEMB_TEST_OTHER_DSN")
    monkeypatch.setattr(ctxemb_pgvector.cli, "DEFAULT_SCHEMA", "tenants")
    code, out, _ = run(capsys, "eval", "--help")
    text = " ".join(out.split())
    assert code == 0
    for words in (
        "folder (default ./elsewhere)",
        "its port (default 8123)",
        "(default: $CTXEMB_TEST_OTHER_DSN)",
        "schema (default: tenants)",
        "or $CTXEMB_TEST_OTHER_DSN is set",
        "local-mode folder (default ./qdrant-elsewhere)",
    ):
        assert words in text, words
    assert "./chroma)" not in text and "8000" not in text and "public" not in text


def test_eval_opens_the_chroma_adapters_default_folder(
    beir, tiny_bert, tmp_path, capsys, monkeypatch
):
    import ctxemb_chroma.cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXEMB_PG_DSN", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(ctxemb_chroma.cli, "DEFAULT_PATH", str(blocker / "store"))
    tiny = ("--model", str(tiny_bert), "--pooling", "mean")  # a model built in code: cheap
    code, _, err = run(capsys, "eval", "--data", str(beir), *tiny)
    assert code == 2 and "StoreUnavailableError" in err and "a-file/store" in err, err
    assert not (tmp_path / "chroma").exists()  # not the folder the command used to name


def test_eval_reads_the_dsn_where_the_pgvector_adapter_reads_it(
    beir, tiny_bert, capsys, monkeypatch
):
    import ctxemb_pgvector.cli

    monkeypatch.delenv("CTXEMB_PG_DSN", raising=False)
    monkeypatch.delenv("CTXEMB_TEST_OTHER_DSN", raising=False)
    monkeypatch.setattr(ctxemb_pgvector.cli, "DSN_ENV", "CTXEMB_TEST_OTHER_DSN")
    tiny = ("--model", str(tiny_bert), "--pooling", "mean")
    code, _, err = run(capsys, "eval", "--via", "pgvector", "--data", str(beir), *tiny)
    assert code == 2 and "needs --dsn" in err and "$CTXEMB_TEST_OTHER_DSN" in err, err
    # Set, it selects pgvector without --via, as it selects the store of every other command:
    # a server that is not there is then the refusal.
    monkeypatch.setenv("CTXEMB_TEST_OTHER_DSN", "postgresql://nobody@/db?host=/nonexistent")
    code, _, err = run(capsys, "eval", "--data", str(beir), *tiny)
    assert code == 2 and "StoreUnavailableError" in err, err
