"""The driver conformance suite against Qdrant's local mode: in memory, in a folder of this
process, and in a persisted folder reopened by a new client (what a fresh process sees)."""

from __future__ import annotations

from typing import ClassVar

import pytest
from conftest import fresh_name

from ctxemb_core.testing.conformance import DriverConformance
from ctxemb_qdrant import QdrantDriver, RawQdrant, connect


@pytest.fixture(scope="module")
def memory():
    return connect(memory=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("qdrant-conformance")


class TestQdrantLocal(DriverConformance):
    """Every guarantee of the suite on local mode in a folder (one client per folder)."""

    #: A point of another width is refused by Qdrant itself; local mode keeps a point without
    #: a vector (a server would refuse it), which the guard catches.
    unstorable: ClassVar[frozenset[str]] = frozenset({"another width"})
    #: ctxemb's collections are Dot: vectors are kept bit for bit.
    vector_tolerance: ClassVar[float] = 0.0

    @pytest.fixture
    def client(self, folder):
        return connect(folder)

    @pytest.fixture
    def name(self) -> str:
        return fresh_name()

    @pytest.fixture
    def new_driver(self, client, name):
        return lambda: QdrantDriver(client, name)

    @pytest.fixture
    def raw(self, client, name):
        return RawQdrant(client, name)


class TestQdrantMemory(TestQdrantLocal):
    """The same in memory (``":memory:"``)."""

    @pytest.fixture
    def client(self, memory):
        return memory
