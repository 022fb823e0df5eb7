"""What a new user tries in the first hour, beyond the README snippets (tests/test_readme.py)."""

from __future__ import annotations

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
