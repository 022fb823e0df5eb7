"""A PostgreSQL server stopped during an upgrade's cutover, at its worst moment: between the
gates passing and the alias row's switch (issue 45's faults). The cutover fails with the store's
typed error, the alias row is as it was (upgrading, on the old target), nothing written is lost,
and once the server is back the same cutover finishes the job."""

from __future__ import annotations

from typing import Any

import pytest
from pg_server import RestartableServer

import ctxemb_pgvector
from ctxemb_core import Embedder
from ctxemb_core.aliases import AliasState, Encoders, backfill, begin_upgrade, create_alias, cutover
from ctxemb_core.errors import StoreUnavailableError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.aliases import IDS, TEXTS, digests
from ctxemb_core.testing.conformance import tiny_embedder


def test_a_server_stopped_during_cutover_switches_nothing_and_a_rerun_finishes(tmp_path):
    # ``immediate``: as a crash (clients lose the socket; the next start replays the log).
    server = RestartableServer(tmp_path / "pg")
    try:
        old = tiny_embedder()
        new = Embedder(old.contract.with_(truncate_dim=8))
        encoders = Encoders(old, new)
        catalog = ctxemb_pgvector.catalog(ctxemb_pgvector.connect(server.dsn))
        GuardedIndex.open(catalog.driver("docs_v1"), old).add(IDS, TEXTS)
        create_alias(catalog, "docs", "docs_v1")
        begin_upgrade(catalog, "docs", new)
        backfill(catalog, "docs", encoders, progress=False)
        before = catalog.aliases.read("docs")

        book: Any = catalog.aliases
        real_swap = book.swap

        def stop_then_swap(record, expected):  # the gates passed: the server goes now
            server.stop("immediate")
            return real_swap(record, expected=expected)

        book.swap = stop_then_swap
        with pytest.raises(StoreUnavailableError):
            cutover(catalog, "docs", encoders)
        server.start()

        again = ctxemb_pgvector.catalog(ctxemb_pgvector.connect(server.dsn))
        assert again.aliases.read("docs") == before  # upgrading, on the old target, untouched
        assert before.state is AliasState.UPGRADING and before.shadow is not None
        switched = cutover(again, "docs", encoders)
        assert switched.state is AliasState.SERVING and switched.target == before.shadow
        assert digests(again, switched.target.index, new) == digests(again, "docs_v1", old)
        assert len(digests(again, "docs_v1", old)) == len(IDS)
    finally:
        server.close()
