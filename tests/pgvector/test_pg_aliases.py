"""Aliases in PostgreSQL (issue 45): the alias conformance suite (one row per alias, switched in
one transaction; each client its own connection), and a row damaged around ctxemb."""

from __future__ import annotations

import pytest

import ctxemb_pgvector
from ctxemb_core.aliases import AliasedIndex
from ctxemb_core.errors import DamagedAliasError
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
