"""Aliases in PostgreSQL (issue 45): the alias conformance suite (one row per alias, switched in
one transaction; each client its own connection), and a row damaged around ctxemb."""

from __future__ import annotations

import pytest

import ctxemb_pgvector
from ctxemb_core.aliases import AliasedIndex
from ctxemb_core.errors import AliasConflictError, DamagedAliasError
from ctxemb_core.testing.aliases import CatalogConformance


class TestPgAliases(CatalogConformance):
    @pytest.fixture
    def new_catalog(self, pg):
        opened = []

        def new():
            conn = ctxemb_pgvector.connect(pg.ctxemb_dsn)
            opened.append(conn)
            return ctxemb_pgvector.catalog(conn)

        yield new
        for conn in opened:
            conn.close()

    def test_a_damaged_row_is_a_typed_error(self, catalog, old, pg):
        pg.execute("UPDATE ctxemb_aliases SET record = '{\"schema\": 1}' WHERE name = 'docs'")
        with pytest.raises(DamagedAliasError, match="docs"):
            AliasedIndex.open(catalog, "docs", old)

    def test_a_restamp_of_an_aliased_table_is_refused_and_writes_nothing(self, catalog, old, pg):
        before = ctxemb_pgvector.stamped_contract(pg, "docs-v1")
        with pytest.raises(AliasConflictError, match=r"alias 'docs' \(target\)"):
            ctxemb_pgvector.restamp(pg, "docs-v1", old.contract.with_(query_prefix="q: "))
        assert ctxemb_pgvector.stamped_contract(pg, "docs-v1") == before
