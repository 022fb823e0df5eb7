"""Aliases in Chroma (issue 45): the alias conformance suite on an embedded store and a real
server (the record a claim collection per generation), and the claims the store keeps."""

from __future__ import annotations

import uuid

import pytest

from ctxemb_chroma import catalog as chroma_catalog
from ctxemb_core.aliases import Encoders, begin_upgrade, cutover, retire, rollback
from ctxemb_core.testing.aliases import CatalogConformance

pytestmark = pytest.mark.transport  # an embedded store and a real server (the client fixture)


class TestChromaAliases(CatalogConformance):
    @pytest.fixture
    def new_catalog(self, client):
        where = client.ctxemb_where
        if "host" not in where:  # an embedded store: a fresh folder per test
            return lambda: chroma_catalog(client)
        # The server is the run's: each test gets a database of its own, and each client of
        # the concurrency test its own HTTP client onto it.
        import chromadb

        database = f"aliases-{uuid.uuid4().hex[:12]}"
        settings = chromadb.Settings(
            chroma_api_impl="chromadb.api.fastapi.FastAPI",
            chroma_server_host=where["host"],
            chroma_server_http_port=where["port"],
        )
        chromadb.AdminClient(settings).create_database(database)
        return lambda: chroma_catalog(
            chromadb.HttpClient(host=where["host"], port=where["port"], database=database)
        )

    def test_only_the_two_newest_claims_stay(self, catalog, old, new):
        begin_upgrade(catalog, "docs", new)
        cutover(catalog, "docs", Encoders(old, new))
        rollback(catalog, "docs", Encoders(old, new))
        retire(catalog, "docs")
        assert catalog.aliases.read("docs").generation == 5
        names = [str(c.name) for c in catalog.client.list_collections()]
        assert sorted(n for n in names if n.startswith("ctxemb-alias--docs--")) == [
            "ctxemb-alias--docs--0000000004",
            "ctxemb-alias--docs--0000000005",
        ]


def test_a_source_given_a_host_alone_takes_the_adapters_default_port(server, monkeypatch):
    import ctxemb_chroma.cli
    from ctxemb_core.aliases import AliasSource

    # The default is the adapter's (its StoreOptions'), read when the store is first reached.
    monkeypatch.setattr(ctxemb_chroma.cli, "DEFAULT_PORT", server)
    source = AliasSource("docs", store="chroma", host="127.0.0.1")
    assert "port" not in source.params()
    try:
        assert source.catalog().describe() == f"server:http://127.0.0.1:{server}"
    finally:
        source.close()
