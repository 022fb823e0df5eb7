"""What a new user tries in the first hour, beyond the README snippets (tests/docs/)."""

from __future__ import annotations

import subprocess

import chromadb

from ctxemb_chroma import open_collection
from ctxemb_core import Embedder, contract_for


def test_a_raw_collection_made_with_hnsw_metadata_can_be_adopted(tmp_path):
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


def test_a_label_only_difference_passes_the_per_document_checks():
    # Stores without collection metadata check a fingerprint per document; a contract that only
    # names the same weights differently makes the same vectors, so it is not refused there.
    from ctxemb_core.contract import DiffKind
    from ctxemb_core.documents import check_documents, check_fingerprint, remember, stamp_meta
    from ctxemb_core.errors import ContractMismatchError

    hub = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    local = hub.with_(model="acme/minilm-copy")
    assert hub.diff(local).kind is DiffKind.LABEL
    remember(hub)
    remember(local)
    assert check_fingerprint(local.fingerprint, hub) == local
    check_documents([stamp_meta({}, hub)], local)
    # Anything more than a label is still refused, by field.
    other = local.with_(query_prefix="query: ")
    remember(other)
    import pytest

    with pytest.raises(ContractMismatchError) as caught:
        check_fingerprint(other.fingerprint, hub)
    assert "query_prefix" in caught.value.fields


def test_langchain_in_memory_store_accepts_a_label_only_difference():
    from langchain_core.vectorstores import InMemoryVectorStore

    from ctxemb_langchain import ContractEmbeddings, ContractVectorStore

    hub = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    inner = InMemoryVectorStore(ContractEmbeddings(hub))
    ContractVectorStore(inner).add_texts(["Green tea is steamed.", "Chains like oil."])
    local = hub.with_(model="acme/minilm-copy")
    inner.embedding = ContractEmbeddings(local)
    found = ContractVectorStore(inner).similarity_search("how is green tea made", k=1)
    assert found[0].page_content == "Green tea is steamed."


def test_contract_for_an_export_folder_is_the_exported_contract(tmp_path):
    import numpy as np
    import pytest

    from ctxemb_core.errors import InvalidContractError
    from ctxemb_core.export import export_model

    hub = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    folder = export_model(hub, tmp_path / "minilm-export")
    assert contract_for(folder) == hub
    assert contract_for(str(folder)) == hub
    served = Embedder(contract_for(folder)).embed_query("how is green tea made")
    direct = Embedder.from_export(folder).embed_query("how is green tea made")
    assert np.array_equal(served, direct)
    # What is applied to the token vectors may still be chosen; the network may not.
    e5 = contract_for(folder, family="e5", query_prefix="question: ")
    assert (e5.query_prefix, e5.document_prefix) == ("question: ", "passage: ")
    assert contract_for(folder, name="acme/minilm").diff(hub).kind.value == "label"
    assert Embedder(contract_for(folder, pooling="cls")).embed_query("x").shape == (384,)
    with pytest.raises(InvalidContractError, match="quantization"):
        contract_for(folder, quantization="int8-dynamic")


# Faithful to "not installed": the path finder does not see these packages.
_NOT_INSTALLED = """
import importlib.machinery, sys
GONE = {gone!r}

class Hider(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in GONE:
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [Hider if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def _run_without(gone: tuple[str, ...], code: str, cache: str) -> subprocess.CompletedProcess:
    import os
    import sys

    return subprocess.run(
        [sys.executable, "-c", _NOT_INSTALLED.format(gone=gone) + code],
        capture_output=True,
        text=True,
        env={**os.environ, "CTXEMB_CACHE_DIR": cache},
        timeout=600,
    )


def test_a_model_folder_in_a_base_install_is_one_error_saying_what_to_install(tmp_path):
    # Base install (no torch, transformers, onnx): a model folder cannot be embedded; the user
    # gets one error naming the extra and the torch-free way, not a warning and then another.
    code = (
        "from ctxemb_core import Embedder, contract_for\n"
        "Embedder(contract_for('sentence-transformers/all-MiniLM-L6-v2')).embed_query('x')\n"
    )
    gone = ("torch", "transformers", "onnx", "safetensors", "sentence_transformers")
    done = _run_without(gone, code, str(tmp_path / "cache"))
    assert done.returncode == 1
    assert "Warning" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxemb_core.errors.MissingDependencyError:")
    assert "pip install 'ctxemb[torch]'" in last and "Embedder.from_export" in last


def test_the_torch_fallback_is_reported_once_per_process(tmp_path):
    # [chroma] + the model package brings torch and transformers but not onnx: the torch backend
    # serves, and says so once, however many embedders of that model the process builds.
    code = (
        "import warnings\n"
        "from ctxemb_core import Embedder, contract_for\n"
        "c = contract_for('sentence-transformers/all-MiniLM-L6-v2')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for changed in (c, c.with_(pooling='cls'), c.with_(query_prefix='q: ')):\n"
        "        assert Embedder(changed).backend == 'torch'\n"
        "print(sum(\"backend='auto'\" in str(w.message) for w in caught))\n"
    )
    done = _run_without(("onnx",), code, str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "1"
