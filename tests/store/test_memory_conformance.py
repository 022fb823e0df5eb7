"""The driver conformance suite, run against the reference in-memory driver as a strong store
(transactions, a write mark, filters) and as weaker ones: without transactions (the guard's
undo puts a failed batch back), without a write mark (opens list every id), and with a batch
limit (a batch written in parts is undone whole) and a seek (``page_near``)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ctxemb_core.index import MemoryStore
from ctxemb_core.testing.conformance import DriverConformance


class TestMemoryDriver(DriverConformance):
    options: ClassVar[dict[str, Any]] = {}

    @pytest.fixture
    def store(self):
        return MemoryStore()

    @pytest.fixture
    def new_driver(self, store):
        return lambda: store.driver("docs", **self.options)

    @pytest.fixture
    def raw(self, store):
        return store.raw("docs")


class TestMemoryDriverWithoutTransactions(TestMemoryDriver):
    options: ClassVar[dict[str, Any]] = {"transactions": False}


class TestMemoryDriverWithoutMarks(TestMemoryDriver):
    options: ClassVar[dict[str, Any]] = {"marks": False, "filters": False}


class TestMemoryDriverInParts(TestMemoryDriver):
    # With a seek too: an open's random others are read by page_near (PostgreSQL's is the other).
    options: ClassVar[dict[str, Any]] = {"max_batch": 2, "seeks": True}
