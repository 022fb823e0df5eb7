"""A refusal speaks the terms of the store it came from and of the interface called, whatever
path reached the store: the store adapter's own calls, core's alias functions over its catalog,
its index object's ``open`` over a driver. (A framework's store adds its own way to adopt, and
never another framework's: ``tests/langchain/test_langchain_any_driver.py``,
``tests/llamaindex/test_llamaindex_qdrant.py``, where the framework is imported already.)"""

from __future__ import annotations

import chromadb
import numpy as np
import pytest
from conftest import fresh_name

import ctxemb_chroma
import ctxemb_qdrant
from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.aliases import create_alias
from ctxemb_core.errors import ContractMismatchError, MissingStampError
from ctxemb_core.testing.conformance import DOCS, tiny_embedder

FRAMEWORKS = ("LangChain", "Haystack", "LlamaIndex")


@pytest.fixture(scope="module")
def tiny() -> Embedder:
    return tiny_embedder()


@pytest.fixture(scope="module")
def other(tiny) -> Embedder:
    return Embedder(tiny.contract.with_(normalize=not tiny.contract.normalize))


@pytest.fixture
def unstamped_chroma(tmp_path, tiny):
    """A collection a plain chromadb client wrote, with the contract's vectors."""
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    name = fresh_name()
    raw = client.create_collection(name, embedding_function=None)
    vectors = tiny.embed_documents(list(DOCS.values()))
    raw.add(ids=list(DOCS), embeddings=np.asarray(vectors), documents=list(DOCS.values()))
    return client, name


def _named_frameworks(message: str) -> set[str]:
    return {f for f in FRAMEWORKS if f in message}


def test_the_chroma_adapter_itself_names_no_framework(unstamped_chroma, tiny):
    client, name = unstamped_chroma
    with pytest.raises(MissingStampError) as err:
        ctxemb_chroma.open_collection(client, name, tiny)
    assert "ctxemb_chroma.open_collection(" in str(err.value)
    assert _named_frameworks(str(err.value)) == set(), str(err.value)


@pytest.fixture
def qdrant(tmp_path):
    client = ctxemb_qdrant.connect(tmp_path / "qdrant")
    yield client
    client.close()


def test_qdrants_index_object_opened_over_a_driver_words_a_mismatch_as_qdrant(qdrant, tiny, other):
    ctxemb_qdrant.open_collection(qdrant, "docs", tiny)
    driver = ctxemb_qdrant.driver(qdrant, "docs")
    with pytest.raises(ContractMismatchError) as err:
        ctxemb_qdrant.GuardedQdrantCollection.open(driver, other)
    assert "ctxemb_qdrant.stamped_contract(" in str(err.value)
    assert "ctxemb_chroma" not in str(err.value)


def test_an_alias_over_an_unstamped_qdrant_collection_is_refused_in_qdrants_words(qdrant, tiny):
    from qdrant_raw import RawQdrant

    RawQdrant(qdrant, "plain", tiny.contract.output_dim).create()
    with pytest.raises(MissingStampError) as err:
        create_alias(ctxemb_qdrant.catalog(qdrant), "live", "plain")
    assert "ctxemb_qdrant.open_collection(client, 'plain', contract, adopt=True)" in str(err.value)
    assert "ctxemb_chroma" not in str(err.value)
    assert "points" in err.value.message_for("cli")  # Qdrant's word for its records


def test_a_missing_index_names_what_the_store_holds_instead(tmp_path, qdrant, tiny):
    chroma = ctxemb_chroma.connect(tmp_path / "chroma")
    for adapter, client in ((ctxemb_chroma, chroma), (ctxemb_qdrant, qdrant)):
        with pytest.raises(Exception, match="the store holds no collection"):
            adapter.open_collection(client, "nosuch", tiny, create=False)
        adapter.open_collection(client, "docs", tiny)
        with pytest.raises(Exception, match="the store holds 'docs'") as err:
            adapter.open_collection(client, "zzz", tiny, create=False)
        assert "the store holds 'docs'" in err.value.message_for("cli")


# -- each audience its own words: a Python caller no command, a ctxemb user no keyword ---------


def _audiences(error: Exception) -> tuple[str, str]:
    return str(error), error.message_for("cli")  # type: ignore[attr-defined]


def test_documents_written_around_ctxemb_are_advised_in_the_callers_framework_alone(tiny):
    from ctxemb_core.documents import check_documents

    for rewrite in ("", "through MyFramework: store.rewrite(ids)"):
        with pytest.raises(MissingStampError) as err:
            check_documents([{}], tiny.contract, ids=["a"], rewrite=rewrite)
        assert _named_frameworks(str(err.value)) == set(), str(err.value)
        assert rewrite in str(err.value)


def test_an_aliased_index_is_restamped_through_the_alias_in_each_audiences_words(tmp_path, tiny):
    from ctxemb_core.errors import AliasConflictError

    client = ctxemb_chroma.connect(tmp_path / "chroma")
    ctxemb_chroma.open_collection(client, "docs", tiny)
    create_alias(ctxemb_chroma.catalog(client), "live", "docs")
    with pytest.raises(AliasConflictError) as err:
        ctxemb_chroma.restamp(client, "docs", tiny.contract.with_(query_prefix="query: "))
    python, cli = _audiences(err.value)
    assert "begin_upgrade(catalog, 'live'" in python and "ctxemb upgrade" not in python
    assert "ctxemb upgrade live" in cli and "begin_upgrade" not in cli
    # The alias's own records are ctxemb's, never offered as the user's collections.
    with pytest.raises(Exception, match="the store holds 'docs'") as missing:
        ctxemb_chroma.open_collection(client, "zzz", tiny, create=False)
    assert "ctxemb-alias" not in str(missing.value)


def test_an_encoder_missing_for_an_alias_is_advised_in_each_audiences_words(tiny):
    from ctxemb_core.errors import NoEncoderError

    python, cli = _audiences(NoEncoderError(tiny.contract, "live"))
    assert "encoders=" in python and "--url" not in python
    assert "--url" in cli and "encoders=" not in cli


def test_an_unset_key_variable_is_named_as_each_audience_gave_it(tiny):
    from ctxemb_core.errors import InvalidInputError
    from ctxemb_core.remote import RemoteEncoder

    with pytest.raises(InvalidInputError) as err:
        RemoteEncoder(
            tiny.contract,
            "http://127.0.0.1:9",
            api="openai",
            reference=IndexStamp.from_embedder(tiny),
            api_key_env="CTXEMB_NOPE",
        )
    python, cli = _audiences(err.value)
    assert "api_key_env='CTXEMB_NOPE'" in python and "--api-key-env" not in python
    assert "--api-key-env CTXEMB_NOPE" in cli and "api_key_env=" not in cli


def test_an_upgrade_over_a_kept_previous_target_is_advised_in_each_audiences_words(
    tmp_path, tiny, other
):
    from ctxemb_core.aliases import Encoders, backfill, begin_upgrade, cutover
    from ctxemb_core.errors import AliasStateError

    catalog = ctxemb_chroma.catalog(ctxemb_chroma.connect(tmp_path / "chroma"))
    ctxemb_chroma.open_collection(catalog.client, "docs", tiny).add(list(DOCS), list(DOCS.values()))
    create_alias(catalog, "live", "docs")
    begin_upgrade(catalog, "live", other)
    backfill(catalog, "live", Encoders(tiny, other), progress=False)
    cutover(catalog, "live", Encoders(tiny, other))
    with pytest.raises(AliasStateError) as err:
        begin_upgrade(catalog, "live", tiny)
    python, cli = _audiences(err.value)
    assert "retire(catalog, 'live')" in python and "--retire" not in python
    assert "ctxemb upgrade live --retire" in cli and "retire(catalog" not in cli
