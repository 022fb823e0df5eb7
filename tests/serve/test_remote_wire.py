"""What stands between a remote encoder and its server (issue 42, items 2-8): a response cache,
answers that are not vectors, a server that trickles, one that echoes the API key, a
third-party server under its own model id and base path, one restarted behind the same URL,
and a Chroma function that asks nothing before its first text.

Every server here is real (``ctxemb serve`` on 127.0.0.1); what stands in front of it is a
small proxy or socket server of this file's helpers (tests/embedding_server.py), as a gateway
or a broken deployment would.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest
from embedding_server import HttpProxy, get, raw_server, serving, vectors_of

from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.errors import EncoderDriftError, InvalidInputError, RemoteEncoderError
from ctxemb_core.remote import RemoteEncoder, remote_probes

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

QUESTIONS = [f"question {i}: where do herons nest" for i in range(12)]
KEY = "sk-live-4f9a1c2b7e0d3a5f"


@pytest.fixture(scope="module")
def served(minilm):
    with serving(minilm, name="minilm-served") as service:
        yield service


@pytest.fixture(scope="module")
def stamp(minilm):
    # The stamp's own probes (no probe longer than max_tokens: truncation is not what these
    # tests are about, and a long probe is most of a canary round's cost).
    return IndexStamp.from_embedder(minilm)


@pytest.fixture(scope="module")
def cls_embedder(minilm_contract):
    return Embedder(minilm_contract.with_(pooling="cls"))


@pytest.mark.heavy
def test_a_response_cache_cannot_answer_the_canary(minilm, stamp, cls_embedder):
    with serving(minilm) as good:
        port = int(good.url.rsplit(":", 1)[1])
        cache = HttpProxy(good.url, cache=True)
        remote = Embedder(
            minilm.contract, url=cache.url, api="openai", reference=stamp, check_every=2
        )
        remote.embed_query(QUESTIONS[0])
        remote.embed_query(QUESTIONS[1])
        remote.embed_query(QUESTIONS[2])  # the second round, on schedule
        assert remote.remote.checks == 2
    # The server behind the cache is redeployed with CLS pooling. The client's connection is to
    # the cache, which stays: only the scheduled canary can see the change, if the cache does
    # not answer it with what the old server said.
    try:
        with serving(cls_embedder, port=port):
            returned = 0
            with pytest.raises(EncoderDriftError):
                for question in QUESTIONS[3:9]:
                    remote.embed_query(question)
                    returned += 1
            assert returned <= 2  # within check_every of the last round, then refused
            # A new client's canary is no copy of an earlier one either.
            with pytest.raises(EncoderDriftError):
                Embedder(minilm.contract, url=cache.url, api="openai", reference=stamp)
    finally:
        cache.close()


def _tamper(minilm, vector):
    """A proxy rewriting every answer that holds no canary probe into ``vector(n)``."""
    probes = set(remote_probes(minilm.contract))

    def tamper(request, answer):
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        if not probes & set(texts):
            for item, old in zip(answer["data"], vectors_of(answer), strict=True):
                item["embedding"] = vector(old)

    return tamper


@pytest.mark.parametrize("api", ["ctxemb", "openai"])
def test_answers_that_are_not_the_contracts_vectors_are_refused(minilm, stamp, api):
    with serving(minilm) as server:
        proxy = HttpProxy(server.url)
        try:
            _refused_through(proxy, minilm, stamp, api)
        finally:
            proxy.close()


def _refused_through(proxy, minilm, stamp, api):
    """Every tampered answer through ``proxy`` is refused, naming the server."""
    remote = Embedder(minilm.contract, url=proxy.url, api=api, reference=stamp)
    for vector, words in (
        (lambda old: [x > 0 for x in old], "not numbers"),
        (lambda old: [0.0] * len(old), "all-zero"),
        (lambda old: [2 * x for x in old], "length 2"),
        (lambda old: [0.5 * x for x in old], "length 0.5"),
    ):
        proxy.tamper = _tamper(minilm, vector)
        with pytest.raises(RemoteEncoderError, match=words) as info:
            remote.embed_documents(["herons nest in colonies"])
        assert proxy.url in str(info.value)


@pytest.mark.heavy
def test_the_timeout_bounds_the_whole_answer(minilm_contract, stamp):
    def trickle(conn):
        conn.recv(65536)
        try:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 4:
                conn.sendall(bytes([byte]))
                time.sleep(0.3)
        except OSError:
            pass
        finally:
            conn.close()

    with raw_server(trickle) as url:
        start = time.monotonic()
        with pytest.raises(RemoteEncoderError, match="too slow") as info:
            RemoteEncoder(minilm_contract, url, api="openai", reference=stamp, timeout=1)
        assert time.monotonic() - start < 3
        assert "headers" not in str(info.value)
        # Each audience its own words: the command line has no timeout option.
        assert "timeout=" in str(info.value) and "timeout=" not in info.value.message_for("cli")
        start = time.monotonic()
        with pytest.raises(RemoteEncoderError, match="too slow"):
            Embedder(minilm_contract, url=url, api="openai", reference=stamp, timeout=1)
        assert time.monotonic() - start < 3


def test_an_api_key_a_server_echoes_is_never_printed(minilm_contract, stamp, monkeypatch):
    monkeypatch.setenv("CTXEMB_TEST_SERVER_KEY", KEY)

    def echo(conn):
        request = conn.recv(65536).decode("latin-1")
        auth = re.search(r"(?im)^authorization: (.*)$", request).group(1).strip()
        body = json.dumps({"error": {"message": f"invalid credentials {auth!r}"}}).encode()
        head = f"HTTP/1.1 401 Unauthorized\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode() + body)
        conn.close()

    def not_json(conn):
        request = conn.recv(65536).decode("latin-1")
        auth = re.search(r"(?im)^authorization: (.*)$", request).group(1).strip()
        body = f"<html>denied: {auth}</html>".encode()
        conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        conn.sendall(body)
        conn.close()

    def in_fields(conn):
        # A 200 whose fields quote the header back: an index, a contract's model.
        request = conn.recv(65536).decode("latin-1")
        auth = re.search(r"(?im)^authorization: (.*)$", request).group(1).strip()
        body = json.dumps(
            {"data": [{"index": auth, "embedding": [auth]}], "contract": {"model": auth}}
        ).encode()
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        conn.close()

    for handler in (echo, not_json, in_fields):
        with raw_server(handler) as url:
            for api in ("openai", "ctxemb"):
                with pytest.raises((InvalidInputError, RemoteEncoderError)) as info:
                    Embedder(
                        minilm_contract,
                        url=url,
                        api=api,
                        reference=stamp,
                        api_key_env="CTXEMB_TEST_SERVER_KEY",
                    )
                err = info.value
                for text in (str(err), repr(err), repr(err.args)):
                    assert KEY not in text and KEY[:12] not in text, text
                assert "***" in str(err) or handler is in_fields


@pytest.mark.heavy
def test_a_third_party_server_is_reached_by_its_own_model_id_and_base_url(served, minilm, stamp):
    # Sent under the contract's model name, the server does not know the model.
    with pytest.raises(InvalidInputError, match="minilm-served"):
        Embedder(minilm.contract, url=served.url + "/v1", api="openai", reference=stamp)
    for base in (served.url, served.url + "/v1"):
        remote = Embedder(
            minilm.contract, url=base, api="openai", reference=stamp, served_model="minilm-served"
        )
        np.testing.assert_allclose(
            remote.embed_query(QUESTIONS[0]), minilm.embed_query(QUESTIONS[0]), atol=1e-5
        )
        # The config carries the id; the URL is the base /embeddings was appended to.
        config = json.loads(json.dumps(remote.config()))["remote"]
        assert config["served_model"] == "minilm-served" and config["url"] == base
    metrics = get(served.url + "/metrics")[2].decode()
    assert re.search(r'route="/embeddings",status="200"', metrics)


@pytest.mark.heavy
def test_a_third_party_server_restarted_behind_the_url_is_checked_before_its_first_vector(
    minilm, cls_embedder, stamp
):
    with serving(minilm) as first:
        port = int(first.url.rsplit(":", 1)[1])
        remote = Embedder(minilm.contract, url=first.url, api="openai", reference=stamp)
        for question in QUESTIONS[:3]:
            remote.embed_query(question)
        assert remote.remote.checks == 1  # one connection, kept alive: one check
    # Redeployed with CLS pooling: the schedule (1,000 requests, 600 s) is far, the new
    # connection is not.
    with serving(cls_embedder, port=port), pytest.raises(EncoderDriftError):
        remote.embed_query(QUESTIONS[3])


def test_a_server_that_closes_every_connection_is_checked_before_every_answer(
    served, minilm, stamp
):
    proxy = HttpProxy(served.url, keep_alive=False)
    try:
        remote = Embedder(
            minilm.contract,
            url=proxy.url,
            api="openai",
            reference=stamp,
            served_model="minilm-served",
        )
        for question in QUESTIONS[:2]:
            got = remote.embed_query(question)
            np.testing.assert_allclose(got, minilm.embed_query(question), atol=1e-5)
        assert remote.remote.checks == 3  # every request a new connection, each checked first
    finally:
        proxy.close()


def test_chromas_function_for_a_server_asks_nothing_until_the_first_text(minilm_contract):
    from ctxemb_chroma import ContractEmbeddingFunction

    # Nothing listens there: building it, and its config, ask nothing.
    ef = ContractEmbeddingFunction(minilm_contract, url="http://127.0.0.1:9")
    assert ef.get_config()["remote"]["url"] == "http://127.0.0.1:9"
    with pytest.raises(InvalidInputError, match="url"):
        ContractEmbeddingFunction(minilm_contract, url="localhost:9")
    with pytest.raises(RemoteEncoderError, match="did not answer"):
        ef(["the first text"])
    # Nor does the function Chroma rebuilds from that config when it reopens a collection.
    rebuilt = ContractEmbeddingFunction.build_from_config(json.loads(json.dumps(ef.get_config())))
    assert rebuilt.get_config() == ef.get_config()
    with pytest.raises(RemoteEncoderError, match="did not answer"):
        rebuilt.embed_query(["the first query"])
