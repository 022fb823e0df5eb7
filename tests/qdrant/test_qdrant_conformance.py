"""The driver conformance suite against Qdrant's local mode: in a folder of this process, and
with the index reloaded from its folder once written (what a new process reads). A process of
its own writing and another opening, and ``":memory:"``: ``test_qdrant_store.py``."""

from __future__ import annotations

from typing import ClassVar

import pytest
from conftest import fresh_name
from qdrant_raw import RawQdrant

from ctxemb_core.index import GuardedIndex
from ctxemb_core.testing.conformance import DOCS, DriverConformance
from ctxemb_qdrant import QdrantDriver, connect


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory):
    """The module's local-mode client of one folder (local mode locks it: one per process)."""
    client = connect(tmp_path_factory.mktemp("qdrant-conformance"))
    yield client
    client.close()


class TestQdrantLocal(DriverConformance):
    """Every guarantee of the suite on local mode in a folder (one client per folder)."""

    #: A point of another width is refused by Qdrant itself; local mode keeps a point without
    #: a vector (`vector={}`), which the guard catches (what a server does is untested here).
    unstorable: ClassVar[frozenset[str]] = frozenset({"another width"})
    #: ctxemb's collections are Dot: vectors are kept bit for bit.
    vector_tolerance: ClassVar[float] = 0.0

    @pytest.fixture
    def qclient(self, local):
        return local

    @pytest.fixture
    def name(self) -> str:
        return fresh_name()

    @pytest.fixture
    def new_driver(self, qclient, name):
        return lambda: QdrantDriver(qclient, name)

    @pytest.fixture
    def raw(self, qclient, name):
        return RawQdrant(qclient, name)


def reload(client) -> None:
    """Close local mode's engine behind ``client`` and load the folder again from disk: every
    driver and raw client holding ``client`` then reads what the folder kept."""
    from qdrant_client.local.qdrant_local import QdrantLocal

    engine = client._client
    engine.close()
    client._client = QdrantLocal(engine.location, force_disable_check_same_thread=True)


class TestQdrantReopened(TestQdrantLocal):
    """The same with the index reloaded from its folder once written (what a new process
    opening the folder reads: the stamp, the identity, payloads and vectors as persisted)."""

    @pytest.fixture
    def docs(self, driver, embedder, qclient):
        index = GuardedIndex.open(driver, embedder)
        index.add(list(DOCS), list(DOCS.values()), [{"n": k} for k in range(len(DOCS))])
        reload(qclient)
        return index
