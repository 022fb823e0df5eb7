"""No password is printed, raised or logged on the PostgreSQL paths (issue 42, item 15).

The database is reached as a role with a password, by a DSN in both of libpq's forms (URL and
key=value), on the command line, in ``$CTXEMB_PG_DSN`` and with ``$PGPASSWORD`` set; every
command's output, every error (its text, its repr), every log record and the reprs of the
objects returned are scanned for the passwords. The masked form is what shows where the DSN is.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from conftest import DOCS, MINILM
from psycopg.conninfo import conninfo_to_dict

import ctxemb_pgvector
from ctxemb_core import contract_for
from ctxemb_core.cli import main
from ctxemb_core.errors import CtxembError
from ctxemb_core.redact import redact_dsn, scrub, secrets_in

PASSWORD = "Pw4ctxembS3cret"
ENV_PASSWORD = "EnvPw0therS3cret"


@pytest.fixture
def dsns(pg, monkeypatch) -> tuple[str, str]:
    """The fresh database reached as a role with a password: (URL form, key=value form)."""
    role = "r" + uuid.uuid4().hex[:10]
    pg.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    parts = conninfo_to_dict(pg.ctxemb_dsn)
    url = pg.ctxemb_dsn.replace("postgres:@", f"{role}:{PASSWORD}@", 1)
    assert PASSWORD in url
    kv = f"host={parts['host']} dbname={parts['dbname']} user={role} password='{PASSWORD}'"
    monkeypatch.setenv("PGPASSWORD", ENV_PASSWORD)
    return url, kv


def clean(text: str) -> str:
    assert PASSWORD not in text and ENV_PASSWORD not in text, text
    return text


def test_redact_masks_both_forms_and_keeps_the_rest():
    assert redact_dsn("postgresql://u:pw@h:5432/db?sslmode=require") == (
        "postgresql://u:***@h:5432/db?sslmode=require"
    )
    assert redact_dsn("postgres://u:p@ss@h/db?password=x&a=b") == (
        "postgres://u:***@h/db?password=***&a=b"
    )
    assert redact_dsn("host=h password = 'a b\\' c' user=u") == "host=h password = *** user=u"
    assert redact_dsn("postgresql://u@h/db") == "postgresql://u@h/db"
    assert secrets_in("host=h password='a b\\' c'", environment=False) == ["a b' c"]
    assert scrub("at u:Secr%40t and Secr@t", secrets_in("postgresql://u:Secr%40t@h/db")) == (
        "at u:*** and ***"
    )


def test_no_command_prints_a_password(dsns, pg, tmp_path, capsys, caplog, monkeypatch):
    url, kv = dsns
    caplog.set_level(logging.DEBUG)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    data = tmp_path / "mini"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text(corpus.read_text())
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "green tea"}))
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ttea\t1\n")
    chroma = str(tmp_path / "chroma")
    on = ("--collection", "docs", "--dsn")
    succeed = [
        ("index", str(corpus), *on, url, "--model", MINILM),
        ("query", *on, url, "green tea"),
        ("query", *on, kv, "--json", "green tea"),
        ("verify", *on, kv),
        ("restamp", *on, url, "--query-prefix", "q: "),
        ("migrate", *on, url, "--to", "copy", "--to-store", "chroma", "--to-path", chroma),
        ("migrate", "--collection", "copy", "--path", chroma, "--to", "back", "--to-dsn", kv),
        ("eval", "--data", str(data), "--dsn", url, "--collection", "mini", "--k", "3"),
    ]
    fail = [
        ("query", *on, "postgresql://u:" + PASSWORD + "@127.0.0.1:1/db", "tea"),
        ("query", *on, f"host=127.0.0.1 port=1 user=u password={PASSWORD}", "tea"),
        ("index", str(corpus), *on, f"host=h password={PASSWORD} junk"),
        ("query", "--collection", "nothere", "--dsn", url, "tea"),
        ("query", *on, url, "tea", "--model", MINILM, "--pooling", "cls"),
        ("query", *on, url, "--store", "chroma", "tea"),
        ("migrate", *on, url, "--to", "x", "--to-dsn", f"postgresql://u:{PASSWORD}@127.0.0.1:1/d"),
    ]
    said = []
    for argv in succeed + fail:
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert (code == 0) == (argv in succeed), (argv, err)
        said.append(clean(out + err))
    monkeypatch.setenv("CTXEMB_PG_DSN", url)
    for argv in (("detect", "--collection", "docs", "--json"), ("query", "--collection", "x", "t")):
        main(list(argv))
        out, err = capsys.readouterr()
        said.append(clean(out + err))
    clean(caplog.text)
    # Where the DSN is shown, it is shown masked.
    assert "***@" in said[0] and "password=***" in said[2] and "***@" in said[-2]


def test_no_error_or_repr_holds_a_password(dsns, pg, minilm):
    url, kv = dsns
    for n, dsn in enumerate(
        (
            url,
            kv,
            f"postgresql://u:{PASSWORD}@127.0.0.1:1/db",
            f"host=127.0.0.1 port=1 user=u password={PASSWORD}",
            f"host=h password={PASSWORD} junk",
            f"postgresql://u:{PASSWORD}@h:notaport/db",
        )
    ):
        try:
            conn = ctxemb_pgvector.connect(dsn)
        except CtxembError as exc:
            clean(str(exc) + repr(exc) + repr(exc.args) + str(exc.__cause__))
            continue
        table = ctxemb_pgvector.open_table(conn, f"docs{n}", minilm)
        table.add(["tea"], [DOCS["tea"]])
        path = ctxemb_pgvector.eval_path(conn, f"docs{n}", minilm)
        clean(repr(conn) + repr(table) + repr(table.stored()) + repr(path))
        conn.close()


def test_the_framework_adapters_raise_no_password(dsns):
    from haystack import Document
    from haystack.utils import Secret
    from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

    from ctxemb_haystack import ContractDocumentWriter
    from ctxemb_langchain import ContractEmbeddings, ContractPGVector

    down = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"
    contract = contract_for(MINILM)
    store = PgvectorDocumentStore(
        connection_string=Secret.from_token(down), table_name="docs", embedding_dimension=384
    )
    doc = Document(
        id="tea",
        content=DOCS["tea"],
        embedding=[0.05] * 384,
        meta={"ctxemb_fingerprint": contract.fingerprint},
    )
    with pytest.raises(CtxembError) as caught:
        ContractDocumentWriter(store).run(documents=[doc])
    clean(str(caught.value) + repr(caught.value))
    with pytest.raises(CtxembError) as caught:
        ContractPGVector("docs", ContractEmbeddings(contract), connection=down)
    clean(str(caught.value) + repr(caught.value))
    assert "***" in str(caught.value)


def test_paths_are_not_mistaken_for_secrets():
    assert scrub("folder /a/b", ["ab"]) == "folder /a/b"  # too short to search for
    assert Path(redact_dsn(123)) == Path("<int>")


def test_a_command_the_advice_gives_holds_no_password_and_no_mask_to_send(
    dsns, tmp_path, capsys, monkeypatch
):
    # A masked password in a command to run would be sent as it is: the advice gives the
    # variable that holds the string, or a placeholder to fill in, never '***'.
    url, _ = dsns
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": i, "text": t}) for i, t in DOCS.items()))
    assert main(["index", str(corpus), "--collection", "docs", "--dsn", url]) == 0
    capsys.readouterr()
    refused = ["query", "--collection", "docs", "--pooling", "cls", "tea"]
    assert main([*refused, "--dsn", url]) == 2
    err = clean(capsys.readouterr().err)
    assert "ctxemb migrate --store pgvector --dsn 'postgresql://" in err and ":<password>@" in err
    monkeypatch.setenv("CTXEMB_PG_DSN", url)
    assert main(refused) == 2
    err = clean(capsys.readouterr().err)
    assert 'ctxemb migrate --store pgvector --dsn "$CTXEMB_PG_DSN"' in err, err
    assert redact_dsn("postgresql://postgres:@h/db") == "postgresql://postgres:@h/db"  # none
