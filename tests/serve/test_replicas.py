"""Replicas of one contract behind one URL (issue 42, item 1): a remote encoder keeps the set of
``ctxemb serve`` instances it has verified, verifies each new one once, and never returns a
vector from one whose check has not passed — behind a real nginx (Debian's nginx-light, a
default ``upstream``: a new replica for every request) and behind a balancer that picks one per
connection, as a Kubernetes Service does, with 8 client threads.

The replicas are real servers on 127.0.0.1 (uvicorn in threads of this process, the embedder
the session already holds); one replica of another recipe, or one whose vectors are not its
contract's, has no vector of its returned.
"""

from __future__ import annotations

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from embedding_server import ConnectionBalancer, nginx, serving

from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.errors import ContractMismatchError, EncoderDriftError

pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

TEXTS = [f"note {i}: herons wait in the shallows for fish" for i in range(24)]


@pytest.fixture(scope="module")
def expected(minilm):
    return minilm.embed_documents(TEXTS)


def _hammer(remote: Embedder, expected: np.ndarray, calls: int = 6) -> tuple[int, list]:
    """8 threads, each embedding slices of TEXTS; (right answers, errors). Any wrong vector
    fails the test at once."""
    errors: list[BaseException] = []
    right = 0
    lock = threading.Lock()

    def work(worker: int) -> None:
        nonlocal right
        for call in range(calls):
            start = (worker * 3 + call) % 20
            try:
                got = remote.embed_documents(TEXTS[start : start + 4])
            except (ContractMismatchError, EncoderDriftError) as exc:
                with lock:
                    errors.append(exc)
                continue
            np.testing.assert_allclose(got, expected[start : start + 4], atol=1e-5)
            with lock:
                right += 1

    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(work, w) for w in range(8)]:
            future.result()
    return right, errors


def _first(make, tries: int = 8):
    """An Embedder built through a balancer that may first reach the wrong replica."""
    for _ in range(tries - 1):
        try:
            return make()
        except (ContractMismatchError, EncoderDriftError):
            continue
    return make()


def _liar(service):
    """Make ``service`` answer with vectors that are not its contract's (its stamp, made at
    start, stays honest): a replica whose encoder changed under the same contract."""
    real = service.batcher.embed

    async def rolled(*args, **kwargs):
        return np.roll(await real(*args, **kwargs), 7, axis=1)

    service.batcher.embed = rolled
    return service


@pytest.mark.heavy
def test_three_replicas_behind_nginx_are_each_verified_once(minilm, expected, tmp_path):
    with (
        serving(minilm) as a,
        serving(minilm) as b,
        serving(minilm) as c,
        nginx([a.url, b.url, c.url], tmp_path / "nginx") as url,
    ):
        remote = Embedder(minilm.contract, url=url)
        right, errors = _hammer(remote, expected)
        assert errors == [] and right == 48
        # Each replica verified once, none since: no canary round beyond its first.
        instances = {a.instance, b.instance, c.instance}
        assert set(remote.remote.verified) == instances
        assert remote.remote.verifications == dict.fromkeys(instances, 1)
        assert set(remote.remote.canary_answers) <= instances


@pytest.mark.heavy
def test_a_replica_of_another_recipe_behind_nginx_never_has_a_vector_returned(
    minilm, minilm_contract, expected, tmp_path
):
    other = Embedder(minilm_contract.with_(pooling="cls"))
    stamp = IndexStamp.from_embedder(minilm)
    with serving(minilm) as good, serving(other) as cls, serving(minilm) as liar:
        _liar(liar)
        with nginx([good.url, cls.url, liar.url], tmp_path / "nginx") as url:
            # Held to an index's stamp: the liar's own stamp is honest, its vectors are not.
            remote = _first(lambda: Embedder(minilm.contract, url=url, reference=stamp))
            right, errors = _hammer(remote, expected)
    assert right > 0
    assert {type(e) for e in errors} <= {ContractMismatchError, EncoderDriftError}
    assert set(remote.remote.verified) == {good.instance}
    # A refusal names the replica that answered, by the id its `ctxemb serve` printed.
    assert {e.instance for e in errors if isinstance(e, ContractMismatchError)} <= {cls.instance}
    assert {e.instance for e in errors if isinstance(e, EncoderDriftError)} <= {liar.instance}


def test_the_refusal_names_the_replica_of_another_recipe_behind_one_url(minilm, minilm_contract):
    """Behind a balancer the URL is every replica's: the refusal names the one to find (its
    instance id, which `ctxemb serve` prints at start), each time the one that answered."""
    other = Embedder(minilm_contract.with_(pooling="cls"))
    with serving(other) as first, serving(other) as second, serving(minilm) as good:
        balancer = ConnectionBalancer([first.url, second.url, good.url])
        try:
            named = []
            for _ in range(2):  # a new encoder, so a new connection: the next replica
                with pytest.raises(ContractMismatchError, match="pooling") as err:
                    Embedder(minilm.contract, url=balancer.url).embed_query("herons")
                named.append(err.value.instance)
                assert f"{balancer.url} (its instance {err.value.instance}," in str(err.value)
                assert pickle.loads(pickle.dumps(err.value)).instance == err.value.instance
            assert named == [first.instance, second.instance]
        finally:
            balancer.close()
    # One encoder from 8 threads, a connection each: each refusal names its own replica.
    with serving(other) as first, serving(other) as second, serving(minilm) as good:
        balancer = ConnectionBalancer([first.url, second.url, good.url])
        try:
            remote = _first(lambda: Embedder(minilm.contract, url=balancer.url))
            right, errors = _hammer(remote, minilm.embed_documents(TEXTS))
            named = {e.instance for e in errors if isinstance(e, ContractMismatchError)}
            assert right > 0 and named == {first.instance, second.instance}
        finally:
            balancer.close()
    # And a replica whose vectors are not its contract's, held to an index's stamp.
    with serving(minilm) as liar:
        _liar(liar)
        stamp = IndexStamp.from_embedder(minilm)
        with pytest.raises(EncoderDriftError) as drift:
            Embedder(minilm.contract, url=liar.url, reference=stamp).embed_query("herons")
        assert drift.value.instance == liar.instance and liar.instance in str(drift.value)
        assert pickle.loads(pickle.dumps(drift.value)).instance == liar.instance


def test_replicas_behind_a_per_connection_balancer(minilm, expected):
    with serving(minilm) as a, serving(minilm) as b, serving(minilm) as c:
        balancer = ConnectionBalancer([a.url, b.url, c.url])
        try:
            remote = Embedder(minilm.contract, url=balancer.url)
            right, errors = _hammer(remote, expected)
            assert errors == [] and right == 48
            # Every thread's connection went to one replica; each replica was checked once.
            instances = {a.instance, b.instance, c.instance}
            assert remote.remote.verifications == dict.fromkeys(instances, 1)
        finally:
            balancer.close()


def test_the_same_contract_under_another_model_id_answers_the_first_call(
    minilm, minilm_contract, expected
):
    relabelled = Embedder(minilm_contract.with_(model="minilm-copy"))
    with serving(minilm) as first:
        remote = Embedder(minilm.contract, url=first.url)
        port = int(first.url.rsplit(":", 1)[1])
    # Restarted under another served model id (ctxemb serve --name).
    with serving(minilm, port=port, name="minilm-prod"):
        np.testing.assert_allclose(remote.embed_documents(TEXTS[:2]), expected[:2], atol=1e-5)
    # Restarted with a label-only change of the contract (another model name, same weights).
    with serving(relabelled, port=port):
        np.testing.assert_allclose(remote.embed_documents(TEXTS[:2]), expected[:2], atol=1e-5)
    assert remote.remote.checks == 3


@pytest.mark.heavy
def test_replicas_under_other_model_ids_behind_nginx_all_answer(
    minilm, minilm_contract, expected, tmp_path
):
    # One contract, three ids: the default, another served id, and a label-only change.
    relabelled = Embedder(minilm_contract.with_(model="minilm-copy"))
    with (
        serving(minilm) as a,
        serving(minilm, name="minilm-prod") as b,
        serving(relabelled) as c,
        nginx([a.url, b.url, c.url], tmp_path / "nginx") as url,
    ):
        remote = Embedder(minilm.contract, url=url)
        for start in range(0, 12, 2):
            got = remote.embed_documents(TEXTS[start : start + 2])
            np.testing.assert_allclose(got, expected[start : start + 2], atol=1e-5)
        assert set(remote.remote.verified) == {a.instance, b.instance, c.instance}
