"""``ContractVectorStore`` names the record it refuses, whatever the inner store makes of it.

Two records written around the guard used to fail inside the inner store, naming nothing:
- a record without metadata in a plain ``langchain_chroma.Chroma``: its own ``get_by_ids``
  builds ``Document(metadata=None)``, a pydantic ``ValidationError``. It carries no fingerprint,
  so it is refused as every unstamped record is (``MissingStampError`` naming its id); the
  ``ContractChroma`` path reads the same record as metadata ``{}`` (its collection stamp stands
  for it) and returns it;
- a record of ``InMemoryVectorStore`` carrying the contract's fingerprint but a vector of
  another width (the fingerprint copied): numpy's error inside the search. It is refused as a
  stamp that contradicts its vector (``DamagedStampError``) naming its id, before the search.
"""

from __future__ import annotations

import chromadb
import pytest
from conftest import DOCS, fresh_name
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctxemb_core.documents import FINGERPRINT_KEY, check_document_widths
from ctxemb_core.errors import DamagedStampError, InvalidInputError, MissingStampError
from ctxemb_langchain import ContractChroma, ContractEmbeddings, ContractVectorStore


@pytest.fixture(scope="module")
def emb(minilm_contract) -> ContractEmbeddings:
    return ContractEmbeddings(minilm_contract)


def test_a_record_without_metadata_in_a_plain_chroma_is_refused_by_id(emb, tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path))
    store = ContractVectorStore(Chroma(fresh_name(), emb, client=client))
    store.add_texts([DOCS["tea"], DOCS["moon"]], ids=["tea", "moon"])
    # Around the guard: Chroma keeps no metadata at all for this record.
    store.store._collection.add(
        ids=["raw"], documents=["Raw text."], embeddings=[emb.embed_documents(["Raw text."])[0]]
    )
    with pytest.raises(MissingStampError, match="raw") as info:
        store.get_by_ids(["tea", "raw"])
    assert "ValidationError" not in repr(info.value)
    # The stamped records still read as they were added; an unknown id is simply absent.
    assert store.get_by_ids(["tea", "nope"]) == [Document(id="tea", page_content=DOCS["tea"])]
    assert store.get_by_ids([]) == []


def test_the_contract_chroma_path_returns_the_same_record_with_empty_metadata(emb, tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path))
    store = ContractChroma(fresh_name(), emb, client=client)
    store.add_texts([DOCS["tea"]], ids=["tea"])  # no metadata: Chroma keeps none
    assert store.get_by_ids(["tea"]) == [Document(id="tea", page_content=DOCS["tea"])]


def forge(store: ContractVectorStore, emb: ContractEmbeddings, width: int) -> None:
    """A record with the contract's fingerprint and a vector of ``width`` components, put in
    the middle of the inner store (outside the sample ``store_sample`` checks first)."""
    records = store.store.store
    items = list(records.items())
    middle = len(items) // 2
    forged = {
        "id": "forged",
        "vector": [0.1] * width,
        "text": "Forged.",
        "metadata": {FINGERPRINT_KEY: emb.contract.fingerprint},
    }
    records.clear()
    records.update(items[:middle])
    records["forged"] = forged
    records.update(items[middle:])


@pytest.mark.parametrize("count", [4, 40], ids=["in the sample", "outside the sample"])
@pytest.mark.parametrize(
    "search",
    [
        lambda s: s.similarity_search("green tea", k=2),
        lambda s: s.similarity_search_with_score("green tea", k=2),
        lambda s: s.similarity_search_by_vector(s.embeddings.embed_query("tea"), k=2),
        lambda s: s.max_marginal_relevance_search("green tea", k=2, fetch_k=4),
    ],
    ids=["similarity", "with score", "by vector", "mmr"],
)
def test_a_forged_record_of_another_width_is_refused_by_id(emb, count, search):
    store = ContractVectorStore(InMemoryVectorStore(emb))
    store.add_texts([f"filler text {k}" for k in range(count)])
    forge(store, emb, 8)
    with pytest.raises(DamagedStampError, match=r"'forged'.*8 components.*384"):
        search(store)


def test_check_document_widths_names_the_first_bad_record(minilm_contract):
    width = minilm_contract.output_dim
    check_document_widths([[0.0] * width, None], minilm_contract, ids=["a", "b"])  # None: unknown
    with pytest.raises(DamagedStampError, match=r"'b'.*3 components") as info:
        check_document_widths([[0.0] * width, [1, 2, 3], [1]], minilm_contract, ids=["a", "b", "c"])
    assert "2 of 3" in str(info.value)
    with pytest.raises(InvalidInputError, match="ids"):
        check_document_widths([[0.0]], minilm_contract, ids=[])


@pytest.fixture(params=["memory", "chroma"])
def guarded(request, emb, tmp_path) -> ContractVectorStore:
    if request.param == "memory":
        inner: object = InMemoryVectorStore(emb)
    else:
        inner = Chroma(fresh_name(), emb, client=chromadb.PersistentClient(path=str(tmp_path)))
    store = ContractVectorStore(inner)  # type: ignore[arg-type]
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    return store


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda v: [float("nan")] * len(v), "NaN or infinite"),
        (lambda v: None, "missing"),
        (lambda v: v[:10], "10 components.*384"),
    ],
    ids=["nan", "none", "short"],
)
@pytest.mark.parametrize("mmr", [False, True], ids=["similarity", "mmr"])
def test_a_bad_raw_query_vector_is_refused_before_the_search(guarded, spoil, message, mmr):
    vector = spoil(guarded.embeddings.embed_query("green tea"))
    search = (
        guarded.max_marginal_relevance_search_by_vector
        if mmr
        else guarded.similarity_search_by_vector
    )
    with pytest.raises(InvalidInputError, match=message):
        search(vector, k=2)
    good = guarded.similarity_search_by_vector(guarded.embeddings.embed_query("green tea"), k=1)
    assert good[0].id == "tea"
