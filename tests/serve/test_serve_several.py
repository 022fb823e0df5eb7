"""One ``ctxemb serve`` carrying several contracts, one model id each (issue 45, item 2): both
sides of an upgrade on one server, over real HTTP on 127.0.0.1.

The models are the conformance suite's tiny static one (built in code, milliseconds) and the
same weights cut to 8 dimensions, another contract: every vector is compared with the local
Embedder's of its contract.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import socket
from collections.abc import Iterator

import numpy as np
import pytest
from embedding_server import get, nginx, post, serving

from ctxemb_core import Embedder, contract_for
from ctxemb_core.aliases import (
    AliasedIndex,
    Encoders,
    MemoryCatalog,
    backfill,
    begin_upgrade,
    create_alias,
    cutover,
)
from ctxemb_core.cli import main
from ctxemb_core.errors import ContractMismatchError, InvalidInputError, ModelNotFoundError
from ctxemb_core.index import GuardedIndex, MemoryStore
from ctxemb_core.remote import server_contract
from ctxemb_core.serve import EmbeddingService
from ctxemb_core.testing.conformance import tiny_embedder

TEXTS = ["green tea is steamed", "slugs eat lettuce"]


@pytest.fixture(scope="module")
def old():
    return tiny_embedder()


@pytest.fixture(scope="module")
def new(old):
    return Embedder(old.contract.with_(truncate_dim=8))


@pytest.fixture(scope="module")
def served(old, new):
    with serving({"tiny": old, "tiny-8": new}) as service:
        yield service


@pytest.fixture(scope="module")
def elsewhere(old, new):
    """A server of several contracts without ``old``'s, and with ``new``'s under another id."""
    with serving({"tiny-4": Embedder(old.contract.with_(truncate_dim=4)), "cut": new}) as s:
        yield s


def _vectors(answer) -> np.ndarray:
    return np.array([d["embedding"] for d in answer["data"]], dtype=np.float32)


def test_each_model_id_gives_its_own_contracts_vectors(served, old, new):
    for name, local in (("tiny", old), ("tiny-8", new)):
        status, headers, answer = post(
            served.url + "/v1/embeddings", {"input": TEXTS, "model": name}
        )
        assert status == 200 and answer["model"] == name
        assert headers["ctxemb-fingerprint"] == local.contract.fingerprint
        np.testing.assert_allclose(_vectors(answer), local.embed_documents(TEXTS), atol=1e-6)
        status, _, answer = post(
            served.url + "/v1/embeddings", {"input": TEXTS[0], "model": f"{name}:query"}
        )
        np.testing.assert_allclose(_vectors(answer)[0], local.embed_query(TEXTS[0]), atol=1e-6)
        # Each model's contract, by its id (or a role's, or its recipe's).
        for asked in (name, f"{name}:query", local.contract.recipe_id):
            status, headers, body = get(f"{served.url}/v1/contract?model={asked}")
            assert status == 200 and json.loads(body)["model"] == name
            assert headers["ctxemb-fingerprint"] == local.contract.fingerprint
    ids = [m["id"] for m in json.loads(get(served.url + "/v1/models")[2])["data"]]
    assert ids == [
        "tiny",
        "tiny:query",
        "tiny:document",
        "tiny-8",
        "tiny-8:query",
        "tiny-8:document",
    ]
    health = json.loads(get(served.url + "/health")[2])
    assert health["models"] == {
        "tiny": old.contract.fingerprint,
        "tiny-8": new.contract.fingerprint,
    }
    metrics = get(served.url + "/metrics")[2].decode()
    assert 'ctxemb_texts_total{model="tiny-8",role="document"}' in metrics
    assert f'fingerprint="{new.contract.fingerprint}"' in metrics


def test_a_request_naming_no_model_or_an_unknown_one_is_refused_listing_the_ids(served):
    status, headers, answer = post(served.url + "/v1/embeddings", {"input": TEXTS})
    assert status == 400 and answer["error"]["code"] == "missing_model"
    assert "'tiny', 'tiny-8'" in answer["error"]["message"]
    assert "ctxemb-fingerprint" not in headers and "ctxemb-instance" in headers
    status, _, answer = post(served.url + "/v1/embeddings", {"input": TEXTS, "model": "tiny-4"})
    assert status == 404 and answer["error"]["code"] == "model_not_found"
    assert "'tiny', 'tiny-8'" in answer["error"]["message"]
    status, _, body = get(served.url + "/v1/contract")
    assert status == 400 and json.loads(body)["error"]["code"] == "missing_model"
    assert get(served.url + "/v1/contract?model=tiny-4")[0] == 404


def test_the_remote_encoder_picks_the_model_of_its_contract(served, old, new):
    for name, local in (("tiny-8", new), ("tiny", old)):
        remote = Embedder(local.contract, url=served.url)
        assert remote.remote.served_id == name
        np.testing.assert_allclose(
            remote.embed_documents(TEXTS), local.embed_documents(TEXTS), atol=1e-6
        )
    other = old.contract.with_(normalize=not old.contract.normalize)
    with pytest.raises(ContractMismatchError, match="'tiny', 'tiny-8'") as caught:
        Embedder(other, url=served.url)
    err = caught.value
    assert err.fields == ("normalize",) and err.server == served.url
    assert (err.served_models, err.served_model) == (("tiny", "tiny-8"), "tiny")
    # The advice is a call that picks one of its models (contract_for(url) cannot: the server
    # has no one contract), and the command line's names --served-model; both survive pickling
    # (a Ray actor's refusal travels pickled).
    for shown in (err, pickle.loads(pickle.dumps(err))):
        assert f"server_contract({served.url!r}, model='tiny').contract" in str(shown)
        assert "contract_for(" not in str(shown)
        assert "--served-model ID" in shown.message_for("cli")
    with pytest.raises(InvalidInputError, match="several contracts"):
        server_contract(served.url)
    assert server_contract(served.url, model="tiny-8").contract == new.contract


def test_an_alias_reader_gets_both_encoders_from_one_server_url(served, old, new):
    catalog = MemoryCatalog(MemoryStore())
    GuardedIndex.open(catalog.driver("docs-v1"), old).add(["tea", "slugs"], TEXTS)
    create_alias(catalog, "docs", "docs-v1")
    reader = AliasedIndex.open(catalog, "docs", Encoders(served.url))
    assert reader.search("tea", 1).fingerprint == old.contract.fingerprint
    begin_upgrade(catalog, "docs", new)
    backfill(catalog, "docs", Encoders(old, new))
    cutover(catalog, "docs", Encoders(old, new))
    # The reader follows: the new index, queried through the same server's other model.
    answer = reader.search("tea", 1)
    assert answer.fingerprint == new.contract.fingerprint
    assert answer.matches[0][0].id == "tea"
    remotes = [reader.encoders.get(c) for c in (old.contract, new.contract)]
    assert [r.remote.served_id for r in remotes] == ["tiny", "tiny-8"]
    assert {r.remote.url for r in remotes} == {served.url}


def test_a_server_refuses_two_ids_of_one_contract(old):
    same = Embedder(old.contract.with_(model="a-copy"))  # a label apart: the same contract
    with pytest.raises(InvalidInputError, match="same contract"):
        EmbeddingService({"tiny": old, "copy": same})
    with pytest.raises(InvalidInputError, match="mapping's keys"):
        EmbeddingService({"tiny": old}, name="tiny")
    with pytest.raises(InvalidInputError, match="without ':'"):
        EmbeddingService({"tiny:x": old})


@contextlib.contextmanager
def _taken_port() -> Iterator[str]:
    """A port another socket listens on: a command that loads every contract before it listens
    refuses it once they are all loaded."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield str(taken.getsockname()[1])


def test_the_command_loads_every_contract_before_it_listens(old, tmp_path, capsys):
    folder = old.source.folders()[0]
    assert folder is not None
    # A contract file of the same weights cut to 8 dimensions (its model named by its path,
    # so the command finds the folder).
    cut = tmp_path / "cut.json"
    cut.write_text(contract_for(folder, name=str(folder), truncate_dim=8).to_json())
    with _taken_port() as port:
        # Both loaded and stamped; then the port, taken, is refused in one line.
        assert main(["serve", str(folder), "--also", f"cut={cut}", "--port", port]) == 2
        assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["serve", str(folder), "--also", f"cut={bad}", "--port", "0"]) == 2
    assert f"--also cut={bad}: " in capsys.readouterr().err
    # Its own contract under the first's id: refused, naming how to give it another.
    assert main(["serve", str(folder), "--also", str(folder), "--port", "0"]) == 2
    assert "--also ID=" in capsys.readouterr().err
    # The same contract under another id (a label apart): refused, serve it once.
    same = tmp_path / "same.json"
    same.write_text(contract_for(folder, name=str(folder)).to_json())
    assert main(["serve", str(folder), "--also", f"copy={same}", "--port", "0"]) == 2
    assert "the same contract" in capsys.readouterr().err


def test_what_ctxemb_inspect_prints_is_a_contract_file_the_command_takes(old, tmp_path, capsys):
    folder = old.source.folders()[0]
    assert folder is not None
    # ctxemb inspect's output ({"fingerprint", "contract"}), saved as a user would save it.
    assert main(["inspect", str(folder), "--name", str(folder), "--truncate-dim", "8"]) == 0
    inspected = tmp_path / "cut.json"
    inspected.write_text(capsys.readouterr().out)
    with _taken_port() as port:
        # Both loaded (the port, taken, is what is refused), first or beside the first.
        assert main(["serve", str(folder), "--also", f"cut={inspected}", "--port", port]) == 2
        assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
        assert main(["serve", str(inspected), "--port", port]) == 2
        assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    # A contract edited under its printed fingerprint: refused, naming both.
    edited = tmp_path / "edited.json"
    edited.write_text(inspected.read_text().replace('"truncate_dim": 8', '"truncate_dim": 4'))
    assert main(["serve", str(folder), "--also", f"cut={edited}", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "DataFormatError" in err and "is not its contract's" in err and "ctxemb inspect" in err


def test_a_server_without_the_contract_is_a_mismatch_behind_a_balancer_too(
    old, elsewhere, tmp_path
):
    # One replica serves the contract; the other serves several, not this one, and answers its
    # id with a 404: the same ContractMismatchError a replica of one other contract gives.
    with serving(old) as good, nginx([good.url, elsewhere.url], tmp_path / "nginx") as url:
        refused: list[ContractMismatchError] = []
        remote = None
        while remote is None:  # the first contact may reach either replica
            try:
                remote = Embedder(old.contract, url=url)
            except ContractMismatchError as exc:
                refused.append(exc)
        right = 0
        for _ in range(6):  # round robin: every other request reaches the other replica
            try:
                got = remote.embed_documents(TEXTS)
            except ContractMismatchError as exc:
                refused.append(exc)
                continue
            np.testing.assert_allclose(got, old.embed_documents(TEXTS), atol=1e-6)
            right += 1
    assert right and refused
    assert {e.served_models for e in refused} == {("tiny-4", "cut")}
    assert {e.fields for e in refused} == {("truncate_dim",)}


def test_a_served_model_id_a_server_lacks_sends_encoders_on_to_the_next_url(
    old, new, served, elsewhere
):
    # The contract under another id: said with the id it is served under.
    with pytest.raises(ModelNotFoundError, match="as model 'cut', not 'tiny-8'") as err:
        Embedder(new.contract, url=elsewhere.url, served_model="tiny-8")
    # Each audience its own words for the same step.
    assert "served_model='cut'" in str(err.value) and "--served-model" not in str(err.value)
    assert "--served-model cut" in err.value.message_for("cli")
    # Neither the id nor the contract: a contract mismatch naming the ids it serves.
    with pytest.raises(ContractMismatchError, match="'tiny-4', 'cut'"):
        Embedder(old.contract, url=elsewhere.url, served_model="tiny")
    encoders = Encoders(elsewhere.url, served.url, served_model="tiny-8")
    found = encoders.get(new.contract)
    assert (found.remote.url, found.remote.served_id) == (served.url, "tiny-8")


def test_the_command_reads_the_contract_of_its_served_model(old, served, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "tea", "text": TEXTS[0]}) + "\n")
    args = ["index", str(corpus), "--path", str(tmp_path / "c"), "--collection", "docs"]
    # Without --model: the contract of the model --served-model names, on a server of several.
    assert main([*args, "--url", served.url, "--served-model", "tiny-8", "--dry-run"]) == 0
    assert "dim=8 [" in capsys.readouterr().out
    # A contract it does not serve: the advice names --served-model and the ids.
    folder = old.source.folders()[0]
    given = ["--url", served.url, "--model", str(folder), "--max-tokens", "16"]
    assert main([*args, *given]) == 2
    err = capsys.readouterr().err
    assert "--served-model ID (one of tiny, tiny-8)" in err and "contract_for" not in err
