"""``ctxemb serve`` (issue 27, item 1): OpenAI's embeddings API under one contract, over real
HTTP on 127.0.0.1, checked with the ``openai`` client and raw requests.

Every vector is compared with the same contract's in-process Embedder; every refusal is a 4xx
with ctxemb's message as JSON, after which the server still answers.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import re

import numpy as np
import pytest
from embedding_server import get, post, serving

from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.serve import ServeLimits

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

TEXTS = ["a cat sat on the mat", "Café prices rose 3.5% in 2024", "x " * 400]


@pytest.fixture(scope="module")
def served(minilm):
    with serving(minilm, max_inputs=8, max_body_bytes=64_000, max_queued=4096) as service:
        yield service


@pytest.fixture(scope="module")
def asymmetric(minilm_contract):
    # Another recipe on the same weights: a query prefix, so the two sides differ.
    contract = minilm_contract.with_(query_prefix="query: ")
    embedder = Embedder(contract)
    with serving(embedder) as service:
        yield service, embedder


def _vectors(payload) -> np.ndarray:
    rows = sorted(payload["data"], key=lambda d: d["index"])
    out = []
    for row in rows:
        value = row["embedding"]
        if isinstance(value, str):
            out.append(np.frombuffer(base64.b64decode(value), dtype="<f4"))
        else:
            out.append(np.asarray(value, dtype=np.float32))
    return np.stack(out)


@pytest.mark.heavy
def test_the_openai_client_gets_the_contracts_vectors_in_both_encodings(served, minilm):
    import openai

    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused")
    expected = minilm.embed_documents(TEXTS)
    for encoding in ("float", "base64"):
        answer = client.embeddings.create(
            model=minilm.contract.model, input=TEXTS, encoding_format=encoding
        )
        rows = [d.embedding for d in answer.data]
        if encoding == "base64":  # asked for explicitly, the client hands the strings over
            rows = [np.frombuffer(base64.b64decode(r), dtype="<f4") for r in rows]
        np.testing.assert_allclose(np.array(rows, dtype=np.float32), expected, atol=1e-6)
    # The client's default (base64 when numpy is there) works as well.
    default = client.embeddings.create(model=minilm.contract.model, input="a cat sat on the mat")
    np.testing.assert_allclose(default.data[0].embedding, expected[0], atol=1e-6)
    # usage: the tokens the encoder read (special tokens in, truncated at max_tokens).
    counts = minilm.token_counts(TEXTS, "document")
    assert counts[-1] == minilm.contract.max_tokens  # the long text was cut
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == int(counts.sum())


def test_every_response_names_the_contract_and_the_process(served, minilm_contract):
    instance = json.loads(get(served.url + "/health")[2])["instance"]
    for status, headers in (
        post(served.url + "/v1/embeddings", {"model": minilm_contract.model, "input": "hi"})[:2],
        post(served.url + "/v1/embeddings", {"model": "nope", "input": "hi"})[:2],
        get(served.url + "/v1/models")[:2],
        get(served.url + "/no/such/route")[:2],
        get(served.url + "/metrics")[:2],
    ):
        assert headers["ctxemb-fingerprint"] == minilm_contract.fingerprint, status
        assert headers["ctxemb-instance"] == instance


def test_the_contract_route_gives_a_stamp_that_verifies_the_local_encoder(served, minilm):
    status, _, body = get(served.url + "/v1/contract")
    assert status == 200
    payload = json.loads(body)
    assert payload["fingerprint"] == minilm.contract.fingerprint
    assert payload["contract"] == minilm.contract.to_dict()
    stamp = IndexStamp.from_metadata(payload["stamp"])
    assert stamp.contract == minilm.contract
    assert stamp.verify(minilm).min_cosine > 0.99999
    ids = [m["id"] for m in json.loads(get(served.url + "/v1/models")[2])["data"]]
    model = minilm.contract.model
    assert ids == [model, f"{model}:query", f"{model}:document"]


def test_a_symmetric_contract_gives_the_same_vectors_under_either_role(served, minilm):
    model = minilm.contract.model
    answers = [
        _vectors(post(served.url + "/v1/embeddings", body)[2])
        for body in (
            {"model": model, "input": TEXTS[:2]},
            {"model": model, "input": TEXTS[:2], "input_type": "query"},
            {"model": f"{model}:document", "input": TEXTS[:2]},
        )
    ]
    for vectors in answers[1:]:
        np.testing.assert_array_equal(vectors, answers[0])


def test_a_contract_whose_sides_differ_never_guesses_the_role(asymmetric):
    service, embedder = asymmetric
    model = embedder.contract.model
    url = service.url + "/v1/embeddings"
    status, _, body = post(url, {"model": model, "input": ["slugs in the garden"]})
    assert status == 400
    message = body["error"]["message"]
    assert body["error"]["code"] == "role_required"
    assert "input_type" in message and f"{model}:query" in message and "query: " in message
    queries = embedder.embed_queries(["slugs in the garden"])
    documents = embedder.embed_documents(["slugs in the garden"])
    by_field = post(url, {"model": model, "input": ["slugs in the garden"], "input_type": "query"})
    by_id = post(url, {"model": f"{model}:query", "input": ["slugs in the garden"]})
    as_document = post(url, {"model": f"{model}:document", "input": ["slugs in the garden"]})
    np.testing.assert_allclose(_vectors(by_field[2]), queries, atol=1e-6)
    np.testing.assert_allclose(_vectors(by_id[2]), queries, atol=1e-6)
    np.testing.assert_allclose(_vectors(as_document[2]), documents, atol=1e-6)
    assert not np.allclose(queries, documents, atol=1e-3)
    # The query prefix's tokens are counted.
    assert by_id[2]["usage"]["prompt_tokens"] == int(
        embedder.token_counts(["slugs in the garden"], "query")[0]
    )
    conflict = post(url, {"model": f"{model}:query", "input": ["x"], "input_type": "document"})
    assert conflict[0] == 400 and conflict[2]["error"]["code"] == "conflicting_role"


@pytest.mark.parametrize(
    ("body", "status", "code", "words"),
    [
        ({"input": []}, 400, "invalid_input", "empty"),
        ({"input": ""}, 400, "invalid_input", "input[0] is empty"),
        ({"input": ["ok", "   "]}, 400, "invalid_input", "input[1]"),
        ({"input": [101, 2023, 102]}, 400, "invalid_input", "token ids"),
        ({"input": [[101, 102]]}, 400, "invalid_input", "token ids"),
        ({"input": 5}, 400, "invalid_input", "input"),
        ({"input": ["ok", 5]}, 400, "invalid_input", "input[1]"),
        ({"input": None}, 400, "missing_input", "no 'input'"),
        ({"input": "\ud800 lone surrogate"}, 400, "invalid_input", "input"),
        ({"input": ["a"] * 9}, 413, "too_many_inputs", "at most 8"),
        ({"input": "a", "dimensions": 128}, 400, "invalid_dimensions", "384"),
        ({"input": "a", "encoding_format": "int8"}, 400, "invalid_encoding_format", "base64"),
        ({"input": "a", "input_type": "passage"}, 400, "invalid_input_type", "'query'"),
        ({"input": "a", "input_type": ["query"]}, 400, "invalid_input_type", "'query'"),
        ({"input": "a", "input_type": {"role": "query"}}, 400, "invalid_input_type", "'query'"),
        ({"input": "a", "input_type": 1}, 400, "invalid_input_type", "'query'"),
        ({"input": "a", "temperature": 1}, 400, "unknown_field", "temperature"),
        ({"input": "a", "precision": "int8"}, 400, "invalid_precision", "float32"),
        ({"input": "a", "model": "text-embedding-3-small"}, 404, "model_not_found", "served"),
        ({"input": "a", "model": None}, 400, "missing_model", "'model' is required"),
    ],
)
def test_bad_requests_are_refused_with_ctxembs_message(served, minilm, body, status, code, words):
    request = {"model": minilm.contract.model, **body}
    if request["input"] is None:
        del request["input"]
    got, _, answer = post(served.url + "/v1/embeddings", request)
    assert got == status, answer
    assert answer["error"]["code"] == code
    assert words in answer["error"]["message"]
    # The server is still there and still right.
    ok = post(served.url + "/v1/embeddings", {"model": minilm.contract.model, "input": ["fine"]})
    assert ok[0] == 200


def test_the_recipe_id_answers_under_any_served_name_and_no_other_recipes(served, minilm):
    # What ctxemb's client sends: replicas of one recipe under other names or labels answer it.
    c = minilm.contract
    assert c.recipe == c.with_(model="relabelled").recipe != c.with_(pooling="cls").recipe
    got, _, answer = post(served.url + "/v1/embeddings", {"model": c.recipe_id, "input": ["x"]})
    assert got == 200 and answer["model"] == c.recipe_id
    np.testing.assert_allclose(_vectors(answer)[0], minilm.embed_documents(["x"])[0], atol=1e-5)
    other = c.with_(pooling="cls").recipe_id
    refused = post(served.url + "/v1/embeddings", {"model": other, "input": ["x"]})
    assert refused[0] == 404 and refused[2]["error"]["code"] == "model_not_found"


def test_bodies_that_are_not_requests_are_refused(served, minilm):
    url = served.url + "/v1/embeddings"
    assert post(url, None, raw=b"{not json")[2]["error"]["code"] == "invalid_json"
    assert post(url, None, raw=b"[1, 2]")[2]["error"]["code"] == "invalid_json"
    big = json.dumps({"model": minilm.contract.model, "input": "word " * 20_000}).encode()
    status, _, answer = post(url, None, raw=big)
    assert status == 413 and "64,000" in answer["error"]["message"]
    status, _headers, _ = get(url)
    assert status == 405
    assert get(served.url + "/v1/nothing")[0] == 404


def test_the_dimensions_of_the_contract_are_accepted(served, minilm):
    body = {"model": minilm.contract.model, "input": "a", "dimensions": 384}
    assert post(served.url + "/v1/embeddings", body)[0] == 200


def test_concurrent_requests_share_batches_and_keep_their_own_vectors(minilm, minilm_contract):
    texts = [f"question number {i} about {w}" for i, w in enumerate("abcdefghijklmnop")]
    expected = minilm.embed_queries(texts)
    with serving(minilm, max_wait_ms=50) as service:
        url = service.url + "/v1/embeddings"

        def ask(i: int) -> np.ndarray:
            status, _, body = post(url, {"model": minilm_contract.model, "input": texts[i]})
            assert status == 200
            return _vectors(body)[0]

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = np.stack(list(pool.map(ask, range(16))))
        metrics = get(service.url + "/metrics")[2].decode()
    # Batched with others, each text's vector is its own (float rounding aside).
    np.testing.assert_allclose(got, expected, atol=1e-6)
    batches = int(re.search(r"^ctxemb_batch_texts_count (\d+)$", metrics, re.M).group(1))
    texts_in = int(
        re.search(r'^ctxemb_texts_total\{role="document"\} (\d+)$', metrics, re.M).group(1)
    )
    assert texts_in == 16
    assert batches < 16, metrics  # requests were gathered, not run one by one


def test_a_full_queue_answers_503_with_retry_after(minilm):
    long = ["the heron waits in the shallows of the river bank " * 24] * 4
    with serving(minilm, max_inputs=4, max_queued=4) as service:
        url = service.url + "/v1/embeddings"
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(
                    lambda _: post(url, {"model": minilm.contract.model, "input": long}), range(8)
                )
            )
        busy = [a for a in answers if a[0] == 503]
        assert busy and all(a[0] in (200, 503) for a in answers)
        assert busy[0][1]["retry-after"] == "1"
        assert "max_queued" in busy[0][2]["error"]["message"]
        ok = post(url, {"model": minilm.contract.model, "input": "a"})
        assert ok[0] == 200


def test_limits_that_would_refuse_an_accepted_request_forever_are_refused():
    # A request of max_inputs texts must fit an idle server's queue.
    with pytest.raises(InvalidInputError, match="max_queued=4 is below max_inputs=8"):
        ServeLimits(max_inputs=8, max_queued=4)
    assert ServeLimits(max_inputs=8, max_queued=8).max_queued == 8


def test_metrics_count_requests_texts_tokens_and_errors(minilm):
    with serving(minilm) as service:
        url = service.url + "/v1/embeddings"
        model = minilm.contract.model
        post(url, {"model": model, "input": TEXTS})
        post(url, {"model": model, "input": []})
        metrics = get(service.url + "/metrics")[2].decode()
    tokens = int(minilm.token_counts(TEXTS, "document").sum())
    assert f'ctxemb_tokens_total{{role="document"}} {tokens}' in metrics
    assert 'ctxemb_texts_total{role="document"} 3' in metrics
    assert 'ctxemb_requests_total{route="/v1/embeddings",status="200"} 1' in metrics
    assert 'ctxemb_requests_total{route="/v1/embeddings",status="400"} 1' in metrics
    assert 'ctxemb_errors_total{kind="invalid_input"} 1' in metrics
    assert "ctxemb_truncated_texts_total 1" in metrics
    assert f'fingerprint="{minilm.contract.fingerprint}"' in metrics
    assert re.search(r'^ctxemb_queue_wait_seconds_bucket\{le="\+Inf"\} 1$', metrics, re.M)
