"""``ContractEmbeddingFunction`` used the Chroma-native way, without ``open_collection``.

Chroma compares only an embedding function's name ("ctxemb") when a collection is fetched, and
hands the function nothing but texts when it embeds. These tests prove that the function itself
refuses a stamped collection of another contract when Chroma fetches it (before anything is
embedded, written or returned), refuses to embed for a collection without a stamp, and that a
collection created the native way with the function's stamp opens through ctxemb as its own.
Each runs on an embedded client; those marked ``transport`` on a real Chroma server too.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
from conftest import DOCS, MINILM, fresh_name

from ctxemb_chroma import ContractEmbeddingFunction, open_collection
from ctxemb_core import IndexStamp, contract_for
from ctxemb_core.errors import ContractMismatchError, DamagedStampError, MissingStampError

THREE = dict(list(DOCS.items())[:3])


@pytest.fixture(scope="module")
def mean():
    return contract_for(MINILM)


@pytest.fixture(scope="module")
def cls(mean):
    return mean.with_(pooling="cls")


@pytest.fixture
def stamped(client, mean):
    """A mean-pooled collection of three documents, written through ctxemb."""
    col = open_collection(client, fresh_name(), mean)
    col.add(list(THREE), list(THREE.values()))
    return col


def stored(client, name):
    got = client.get_collection(name, embedding_function=None).get(include=["embeddings"])
    return dict(zip(got["ids"], np.asarray(got["embeddings"]), strict=True))


def assert_unchanged(client, name, before):
    after = stored(client, name)
    assert sorted(after) == sorted(before)
    for key, vector in before.items():
        np.testing.assert_array_equal(after[key], vector)


def assert_pooling_refused(info):
    assert info.value.fields == ("pooling",)
    assert "pooling: index='mean', caller='cls'" in str(info.value)


# -- another contract ----------------------------------------------------------------------------


@pytest.mark.transport
def test_another_contract_is_refused_on_get(client, stamped, cls):
    before = stored(client, stamped.name)
    with pytest.raises(ContractMismatchError) as info:
        client.get_collection(stamped.name, embedding_function=ContractEmbeddingFunction(cls))
    assert_pooling_refused(info)
    assert_unchanged(client, stamped.name, before)


def test_another_contract_is_refused_on_get_by_id(client, stamped, cls):
    with pytest.raises(ContractMismatchError) as info:
        client.get_collection_by_id(
            stamped.raw.id, embedding_function=ContractEmbeddingFunction(cls)
        )
    assert_pooling_refused(info)


def test_another_contract_is_refused_on_get_or_create(client, stamped, cls):
    before = stored(client, stamped.name)
    ef = ContractEmbeddingFunction(cls)
    with pytest.raises(ContractMismatchError) as info:
        client.get_or_create_collection(stamped.name, embedding_function=ef)
    assert_pooling_refused(info)
    # Chroma keeps an existing collection's metadata on get_or_create: no stamp of ours replaces it.
    with pytest.raises(ContractMismatchError):
        client.get_or_create_collection(
            stamped.name, embedding_function=ef, metadata=ef.stamp_metadata()
        )
    assert_unchanged(client, stamped.name, before)
    assert IndexStamp.from_metadata(stamped.stored().metadata).contract.pooling == "mean"


def test_a_handle_made_before_the_fetch_check_still_embeds_nothing(client, stamped, cls, mean):
    # Chroma's Collection is built from what the store returned; a handle that escaped the fetch
    # check (made by hand here) is refused by the function itself before it embeds.
    from chromadb.api.models.Collection import Collection

    model = stamped.stored().get_model()
    handle = Collection(client._server, model, embedding_function=ContractEmbeddingFunction(cls))
    before = stored(client, stamped.name)
    with pytest.raises(ContractMismatchError) as on_add:
        handle.add(ids=["intruder"], documents=["An intruding note."])
    assert_pooling_refused(on_add)
    with pytest.raises(ContractMismatchError):
        handle.query(query_texts=["a question"], n_results=1)
    with pytest.raises(ContractMismatchError):
        handle.upsert(ids=["tea"], documents=["Rewritten."])
    assert_unchanged(client, stamped.name, before)


def test_a_configuration_changed_around_ctxemb_is_refused_on_a_raw_reopen(client, stamped, cls):
    # Chroma persists a new configuration before the function's validate_config_update refuses
    # it; a later raw get_collection(name) rebuilds the changed function, which then refuses to
    # embed for the collection whose stamp says otherwise.
    with contextlib.suppress(ContractMismatchError, ValueError):
        stamped.raw.modify(configuration={"embedding_function": ContractEmbeddingFunction(cls)})
    raw = client.get_collection(stamped.name)
    if raw.configuration_json["embedding_function"]["config"]["contract"]["pooling"] != "cls":
        pytest.skip("this Chroma did not persist the refused configuration")
    before = stored(client, stamped.name)
    with pytest.raises(ContractMismatchError) as info:
        raw.query(query_texts=["a question"], n_results=1)
    assert_pooling_refused(info)
    with pytest.raises(ContractMismatchError):
        raw.add(ids=["intruder"], documents=["An intruding note."])
    assert_unchanged(client, stamped.name, before)


# -- the same contract -----------------------------------------------------------------------------


@pytest.mark.transport
def test_the_same_contract_reads_and_writes_natively(client, stamped, mean):
    raw = client.get_collection(stamped.name, embedding_function=ContractEmbeddingFunction(mean))
    ours = stamped.query(["how is green tea made"], n_results=2, include=["distances"])
    theirs = raw.query(query_texts=["how is green tea made"], n_results=2, include=["distances"])
    assert theirs["ids"] == ours["ids"]
    np.testing.assert_allclose(theirs["distances"], ours["distances"], atol=1e-5)
    raw.add(ids=["slug"], documents=[DOCS["slug"]])
    again = client.get_or_create_collection(
        stamped.name, embedding_function=ContractEmbeddingFunction(mean)
    )
    again.upsert(ids=["river"], documents=[DOCS["river"]])
    # What the native calls wrote is this contract's: ctxemb's full open checks every record.
    col = open_collection(client, stamped.name, mean, sample=10)
    assert col.count() == 5
    assert col.query(["night garden pests"], n_results=1)["ids"][0][0] == "slug"


@pytest.mark.transport
def test_a_raw_reopen_without_a_function_rebuilds_it_and_stays_guarded(client, stamped, mean):
    raw = client.get_collection(stamped.name)  # Chroma rebuilds ctxemb's function from its config
    assert raw.configuration_json["embedding_function"]["name"] == "ctxemb"
    raw.add(ids=["slug"], documents=[DOCS["slug"]])
    hits = raw.query(query_texts=["night garden pests"], n_results=1)
    assert hits["ids"][0][0] == "slug"
    open_collection(client, stamped.name, mean, sample=10)


# -- creating natively -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["create", "get_or_create"])
def test_a_native_create_without_the_stamp_is_refused_on_write(client, mean, cls, how):
    name = fresh_name()
    ef = ContractEmbeddingFunction(mean)
    raw = getattr(client, f"{how}_collection")(name, embedding_function=ef)
    with pytest.raises(MissingStampError, match="stamp_metadata") as info:
        raw.add(ids=list(THREE), documents=list(THREE.values()))
    assert "adopt=True" in str(info.value)
    with pytest.raises(MissingStampError):
        raw.query(query_texts=["a question"], n_results=1)
    assert client.get_collection(name, embedding_function=None).count() == 0
    # Chroma persisted ctxemb's function with the contract: another contract is refused on get.
    with pytest.raises(ContractMismatchError) as other:
        client.get_collection(name, embedding_function=ContractEmbeddingFunction(cls))
    assert other.value.fields == ("pooling",)
    # The advice works: adopting the empty collection stamps it, and the native path then writes.
    open_collection(client, name, mean, adopt=True)
    client.get_collection(name, embedding_function=ef).add(ids=["tea"], documents=[DOCS["tea"]])
    assert open_collection(client, name, mean, sample=10).count() == 1


@pytest.mark.transport
@pytest.mark.parametrize("how", ["create", "get_or_create"])
def test_a_native_create_with_the_stamp_is_a_ctxemb_collection(client, mean, cls, how):
    name = fresh_name()
    ef = ContractEmbeddingFunction(mean)
    raw = getattr(client, f"{how}_collection")(
        name, embedding_function=ef, metadata={**ef.stamp_metadata(), "topic": "garden"}
    )
    raw.add(ids=list(THREE), documents=list(THREE.values()))
    assert raw.metadata["topic"] == "garden"
    col = open_collection(client, name, mean, create=False, sample=10)  # no adoption needed
    assert col.count() == 3
    assert col.query(["how is green tea made"], n_results=1)["ids"][0][0] == "tea"
    with pytest.raises(ContractMismatchError) as on_open:
        open_collection(client, name, cls)
    assert on_open.value.fields == ("pooling",)
    with pytest.raises(ContractMismatchError):
        client.get_collection(name, embedding_function=ContractEmbeddingFunction(cls))


def test_the_function_embeds_as_before_outside_a_collection(mean):
    # Called directly (by a user, or a framework that passes vectors to Chroma), it is only an
    # embedding function: no collection to check, nothing to refuse.
    ef = ContractEmbeddingFunction(mean)
    assert len(ef(["one text"])[0]) == 384
    assert len(ef.embed_query(["one question"])[0]) == 384
    assert ContractEmbeddingFunction.name() == ef.name() == "ctxemb"


# -- what else the check reads -----------------------------------------------------------------


def test_a_stamp_that_cannot_be_read_is_refused_on_get(client, mean):
    ef = ContractEmbeddingFunction(mean)
    damaged = {**ef.stamp_metadata(), "ctxemb:canary": "f32le:AAAA"}
    name = fresh_name()
    client.create_collection(name, embedding_function=ef, metadata=damaged)
    with pytest.raises(DamagedStampError):
        client.get_collection(name, embedding_function=ef)


def test_another_name_for_the_same_weights_is_the_same_contract(client, stamped, mean):
    # A copied folder under another name makes the same vectors (the stamp's check_contract
    # accepts a label difference; the canary decides on open).
    label = mean.with_(model="acme/minilm-copy")
    raw = client.get_collection(stamped.name, embedding_function=ContractEmbeddingFunction(label))
    assert raw.query(query_texts=["how is green tea made"], n_results=1)["ids"][0][0] == "tea"


def test_the_refusal_says_which_collection_and_what_to_do(client, mean):
    name = fresh_name()
    raw = client.create_collection(name, embedding_function=ContractEmbeddingFunction(mean))
    with pytest.raises(MissingStampError) as info:
        raw.add(ids=["tea"], documents=[DOCS["tea"]])
    message = str(info.value)
    assert message.startswith(f"collection {name!r} carries no ctxemb stamp")
    assert "open_collection(client, name, contract)" in message


def test_the_async_client_is_guarded_alike(server, mean, cls):
    import chromadb

    async def scenario() -> None:
        client = await chromadb.AsyncHttpClient(host="127.0.0.1", port=server)
        ef = ContractEmbeddingFunction(mean)
        name = fresh_name()
        col = await client.create_collection(
            name, embedding_function=ef, metadata=ef.stamp_metadata()
        )
        await col.add(ids=list(THREE), documents=list(THREE.values()))
        with pytest.raises(ContractMismatchError) as info:
            await client.get_collection(name, embedding_function=ContractEmbeddingFunction(cls))
        assert_pooling_refused(info)
        same = await client.get_collection(name, embedding_function=ef)
        hits = await same.query(query_texts=["how is green tea made"], n_results=1)
        assert hits["ids"][0][0] == "tea"
        unstamped = await client.create_collection(fresh_name(), embedding_function=ef)
        with pytest.raises(MissingStampError):
            await unstamped.add(ids=["tea"], documents=[DOCS["tea"]])
        assert await unstamped.count() == 0

    asyncio.run(scenario())
