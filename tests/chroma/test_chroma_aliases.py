"""Aliases in Chroma (issue 45): the record kept in the same store, switched by an atomic
claim, and an upgrade through it, on an embedded store and a server."""

from __future__ import annotations

import threading

import pytest

from ctxemb_chroma._aliases import ChromaCatalog
from ctxemb_core import Embedder
from ctxemb_core.aliases import (
    AliasedIndex,
    Encoders,
    begin_upgrade,
    create_alias,
    cutover,
    retire,
    rollback,
)
from ctxemb_core.errors import AliasConflictError, UnknownAliasError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.conformance import tiny_embedder


@pytest.fixture(scope="module")
def old() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old: Embedder) -> Embedder:
    return Embedder(old.contract.with_(truncate_dim=8))


pytestmark = pytest.mark.transport  # an embedded store and a real server (the client fixture)


@pytest.fixture
def catalog(client, tmp_path, old):
    catalog = ChromaCatalog(client)
    name = f"docs-{tmp_path.name[-8:]}".replace("_", "-")
    GuardedIndex.open(catalog.driver(name), old).add(
        [f"d{k}" for k in range(20)], [f"document {k} about green tea" for k in range(20)]
    )
    create_alias(catalog, f"a{name}", name)
    return catalog, f"a{name}", name


def test_an_upgrade_through_a_chroma_alias(catalog, old, new):
    catalog, alias, first = catalog
    reader = AliasedIndex.open(catalog, alias, Encoders(old, new))
    assert reader.search("green tea").index == first
    record = begin_upgrade(catalog, alias, new)
    reader.upsert(["w1"], ["green tea document"])
    switched = cutover(catalog, alias, Encoders(old, new))
    assert switched.target.index == record.shadow.index
    answered = reader.search("green tea", 3)
    assert (answered.index, answered.fingerprint) == (
        record.shadow.index,
        new.contract.fingerprint,
    )
    assert "w1" in reader.ids()
    rollback(catalog, alias, Encoders(old, new))
    assert reader.search("green tea").index == first
    retire(catalog, alias)
    assert not catalog.exists(record.shadow.index)
    assert catalog.aliases.read(alias).generation == 5
    # Only the two newest claims stay in the store.
    claims = [c for c in catalog.client.list_collections() if alias in str(c.name)]
    assert len(claims) == 2


def test_chroma_alias_refusals(catalog, old):
    catalog, _, first = catalog
    with pytest.raises(AliasConflictError):
        create_alias(catalog, first, first)
    with pytest.raises(UnknownAliasError):
        AliasedIndex.open(catalog, "missing-alias", old)


def test_of_two_clients_swapping_one_generation_one_wins(catalog):
    catalog, alias, _ = catalog
    seen = catalog.aliases.read(alias)
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def swap() -> None:
        barrier.wait()
        results.append(catalog.aliases.swap(seen.next("test"), expected=seen.generation))

    threads = [threading.Thread(target=swap) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert catalog.aliases.read(alias).generation == seen.generation + 1
