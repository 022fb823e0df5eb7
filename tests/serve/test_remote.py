"""A remote encoder under a contract (issue 27, item 2): ``Embedder(contract, url=...)`` against
real servers on 127.0.0.1 — ``ctxemb serve`` by its fingerprint and canary, and the same server
spoken to as a third-party OpenAI-compatible one, held to the contract by the canary alone.

A "redeployed" server is a real one stopped and started again on the same port with another
recipe behind it.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from embedding_server import serving

from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.errors import (
    ContractMismatchError,
    EncoderDriftError,
    InvalidArgumentsError,
    InvalidInputError,
    RemoteEncoderError,
)
from ctxemb_core.remote import long_probe

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

DOCS = ["slugs eat lettuce at night", "Café prices rose 3.5% in 2024", "tea " * 300]
QUERIES = ["how do I keep slugs off lettuce"]


@pytest.fixture(scope="module")
def served(minilm):
    with serving(minilm) as service:
        yield service


@pytest.fixture(scope="module")
def cls_embedder(minilm_contract):
    return Embedder(minilm_contract.with_(pooling="cls"))


def test_a_remote_embedder_gives_the_local_vectors(served, minilm):
    remote = Embedder(minilm.contract, url=served.url)
    assert remote.backend == "remote" and remote.remote.checks == 1
    np.testing.assert_allclose(
        remote.embed_documents(DOCS), minilm.embed_documents(DOCS), atol=1e-6
    )
    np.testing.assert_allclose(
        remote.embed_query(QUERIES[0]), minilm.embed_query(QUERIES[0]), atol=1e-6
    )
    assert contract_for(served.url) == minilm.contract
    assert contract_for(served.url + "/v1/") == minilm.contract


def test_its_config_carries_the_url_and_rebuilds_it(served, minilm, monkeypatch):
    monkeypatch.setenv("CTXEMB_TEST_KEY", "sk-secret-value")
    remote = Embedder(minilm.contract, url=served.url, api_key_env="CTXEMB_TEST_KEY")
    config = json.loads(json.dumps(remote.config()))
    assert config["remote"]["url"] == served.url
    assert config["remote"]["api_key_env"] == "CTXEMB_TEST_KEY"
    assert "sk-secret-value" not in json.dumps(config)
    again = Embedder.from_config(config)
    assert again.remote is not None and again.remote.url == served.url
    np.testing.assert_array_equal(again.embed_documents(DOCS[:1]), remote.embed_documents(DOCS[:1]))
    monkeypatch.delenv("CTXEMB_TEST_KEY")
    with pytest.raises(InvalidInputError, match="CTXEMB_TEST_KEY"):
        Embedder.from_config(config)


def test_a_server_of_another_contract_is_refused_naming_the_fields(served, minilm_contract):
    caller = minilm_contract.with_(pooling="cls", normalize=False)
    with pytest.raises(ContractMismatchError) as info:
        Embedder(caller, url=served.url)
    err = info.value
    assert err.fields == ("pooling", "normalize")
    assert err.server == served.url
    assert "server='mean', caller='cls'" in str(err)
    assert pickle.loads(pickle.dumps(err)).server == served.url


def test_a_replaced_server_is_verified_again_before_its_vectors_are_used(minilm, cls_embedder):
    with serving(minilm) as first:
        url = first.url
        remote = Embedder(minilm.contract, url=url)
        before = remote.embed_documents(DOCS[:2])
        port = int(url.rsplit(":", 1)[1])
    # Restarted with the same contract: a new instance, checked once more, then used.
    with serving(minilm, port=port):
        np.testing.assert_allclose(remote.embed_documents(DOCS[:2]), before, atol=1e-6)
        assert remote.remote.checks == 2
    # Redeployed with CLS pooling under the same URL: refused before a vector is returned.
    with serving(cls_embedder, port=port):
        with pytest.raises(ContractMismatchError, match="pooling: server='cls', caller='mean'"):
            remote.embed_documents(DOCS[:2])
        with pytest.raises(ContractMismatchError):  # and on every call after
            remote.embed_query("anything")
    with pytest.raises(RemoteEncoderError, match="did not answer"):
        remote.embed_query("nobody is listening")


@pytest.mark.heavy
def test_an_openai_compatible_server_is_held_to_the_contract_by_the_canary(
    served, minilm, cls_embedder
):
    # ctxemb serve spoken to as any OpenAI-compatible server: no fingerprint is read.
    third = Embedder(minilm.contract, url=served.url, api="openai")
    np.testing.assert_allclose(third.embed_documents(DOCS), minilm.embed_documents(DOCS), atol=1e-6)
    # The caller's contract says mean; the server pools CLS under the same model id.
    with serving(cls_embedder) as other, pytest.raises(EncoderDriftError) as info:
        Embedder(minilm.contract, url=other.url, api="openai")
    assert info.value.server == other.url
    assert "no vector was returned" in str(info.value)


def test_ctxemb_serve_spoken_to_as_openai_under_a_precision_contract_is_refused(minilm):
    # Its OpenAI-compatible answers are in the stored form already (int8 here): quantised there
    # and again here, they would be other vectors. Its own protocol asks for the floats.
    int8 = Embedder(minilm.contract.with_(precision="int8"))
    with serving(int8) as server:
        with pytest.raises(RemoteEncoderError) as refused:
            Embedder(int8.contract, url=server.url, api="openai")
        assert "api='ctxemb'" in str(refused.value)
        assert "--api ctxemb" in refused.value.message_for("cli")
        own = Embedder(int8.contract, url=server.url)
        assert np.array_equal(own.embed_documents(DOCS[:2]), int8.embed_documents(DOCS[:2]))


@pytest.mark.heavy
def test_the_long_probe_catches_another_truncation(minilm_contract, minilm):
    long = long_probe(minilm_contract.max_tokens)
    assert minilm.token_counts([long], "document")[0] == minilm_contract.max_tokens
    # A server that truncates at 512 where the contract says 256: every short probe agrees.
    later = Embedder(minilm_contract.with_(max_tokens=512))
    with serving(later) as server, pytest.raises(EncoderDriftError, match="Sourdough"):
        Embedder(minilm_contract, url=server.url, api="openai")


@pytest.mark.heavy
def test_the_canary_is_checked_again_on_schedule_and_a_failed_server_returns_nothing(
    minilm, cls_embedder
):
    with serving(minilm) as good:
        port = int(good.url.rsplit(":", 1)[1])
        remote = Embedder(minilm.contract, url=good.url, api="openai", check_every=3)
        for _ in range(3):
            remote.embed_query("a question")
        assert remote.remote.checks == 1
        remote.embed_query("a question")  # the fourth request starts a canary round
        assert remote.remote.checks == 2
    with serving(cls_embedder, port=port):
        # Within three requests of the last round, a third-party server's change is not seen
        # (it names no instance); the next round refuses it, and so does every call after.
        seen = 0
        with pytest.raises(EncoderDriftError):
            for _ in range(5):
                remote.embed_query("a question")
                seen += 1
        assert seen <= 3
        with pytest.raises(EncoderDriftError):
            remote.embed_query("a question")
    with serving(minilm, port=port):  # fixed: the next call checks, passes and answers
        np.testing.assert_allclose(
            remote.embed_query("a question"), minilm.embed_query("a question"), atol=1e-6
        )


def test_an_index_stamped_locally_is_queried_through_a_server_and_back(served, minilm, tmp_path):
    import chromadb

    from ctxemb_chroma import open_collection

    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    local = open_collection(client, "docs", minilm)
    local.add(["d0", "d1", "d2"], DOCS)
    remote = Embedder(minilm.contract, url=served.url)
    through = open_collection(client, "docs", remote)  # the stamp's canary, through the server
    hits = through.query(QUERIES, n_results=3)
    assert hits["ids"][0] == local.query(QUERIES, n_results=3)["ids"][0]
    through.add(["d3"], ["herons stand in the river"])
    assert local.query(["herons"], n_results=1)["ids"][0] == ["d3"]
    # Held to an index's stamp instead of the server's own.
    stamp = IndexStamp.from_embedder(minilm)
    checked = Embedder(minilm.contract, url=served.url, api="openai", reference=stamp)
    assert checked.remote.checks == 1


def test_remote_options_are_checked_before_anything_is_sent(minilm_contract, served):
    with pytest.raises(InvalidArgumentsError, match="exclude each other"):
        Embedder(minilm_contract, url=served.url, path="/tmp")
    with pytest.raises(InvalidInputError, match="api must be"):
        Embedder(minilm_contract, url=served.url, api="grpc")
    for url in (
        "localhost:8080",
        "ftp://host",
        "http://u:p@host:1",
        "http://host:1/?x=1",
        "http://host:1/v1/embeddings",
    ):
        with pytest.raises(InvalidInputError, match="url"):
            Embedder(minilm_contract, url=url)
    with pytest.raises(InvalidInputError, match="check_every"):
        Embedder(minilm_contract, url=served.url, check_every=-1)
    with pytest.raises(InvalidInputError, match="over HTTP"):
        Embedder(minilm_contract, url=served.url).embed_tokens("hello")
    with pytest.raises(RemoteEncoderError, match=r"not ctxemb serve|did not answer"):
        Embedder(minilm_contract, url="http://127.0.0.1:9")
