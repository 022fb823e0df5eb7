"""Embedded Chroma's write mark (``ctxemb_chroma._embedded``): the store's own sequence numbers,
raised by every write, ctxemb's or a raw client's; a server's client keeps none."""

from __future__ import annotations

import chromadb
import pytest
from conftest import fresh_name

from ctxemb_chroma import ChromaDriver, connect
from ctxemb_core.errors import InvalidInputError


def _raw(client: chromadb.ClientAPI, name: str) -> chromadb.Collection:
    return client.create_collection(name, embedding_function=None)


def test_an_embedded_store_numbers_every_write_and_lists_what_followed_a_mark(tmp_path):
    client = connect(str(tmp_path / "db"))
    name = fresh_name()
    raw = _raw(client, name)
    driver = ChromaDriver(client, name)
    assert driver.capabilities.marks
    empty = driver.head()
    assert empty is not None and empty.mark == 0
    raw.add(ids=["a", "b", "c"], embeddings=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    first = driver.head().mark
    assert first > 0 and driver.changes(0) == ["a", "b", "c"]
    assert driver.changes(first) == []
    raw.upsert(ids=["b"], embeddings=[[0.5, 0.5]])  # rewritten in place, around ctxemb
    second = driver.head().mark
    assert second > first and driver.changes(first) == ["b"]
    raw.delete(ids=["c"])  # a delete raises the mark; a deleted record is not listed
    assert driver.head().mark > second and driver.changes(second) == []
    # A second client of the same folder (as another process would be) reads the same numbers.
    other = ChromaDriver(chromadb.PersistentClient(path=str(tmp_path / "db")), name)
    assert other.head().mark == driver.head().mark
    assert other.changes(first) == ["b"]


def test_stores_without_the_file_declare_no_mark(server):
    name = fresh_name()
    for client in (connect(memory=True), connect(host="127.0.0.1", port=server)):
        _raw(client, name)
        driver = ChromaDriver(client, name)
        assert not driver.capabilities.marks
        assert driver.head().mark is None
        with pytest.raises(InvalidInputError, match="no write mark"):
            driver.changes(0)
