"""What every adapter takes from core: the Embedder's config and rebuild, the migration loop."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DOCS, fresh_name

from ctxemb_core import Embedder
from ctxemb_core.contract import load_contract
from ctxemb_core.documents import remember
from ctxemb_core.errors import (
    ContractMismatchError,
    DataFormatError,
    ExistingIdsError,
    InvalidInputError,
)
from ctxemb_core.guard import check_embedded, similarity
from ctxemb_core.migrate import Page, copy_missing

TEXTS = ["Green tea leaves are steamed.", "A bicycle chain likes oil."]


def test_an_embedder_config_survives_json_and_embeds_identically(minilm):
    config = json.loads(json.dumps(minilm.config()))
    assert config["contract"] == minilm.contract.to_dict()
    again = Embedder.from_config(config)
    assert again.contract == minilm.contract and again.backend == minilm.backend
    np.testing.assert_array_equal(again.embed_documents(TEXTS), minilm.embed_documents(TEXTS))
    assert Embedder.from_config(config, batch_size=3).batch_size == 3


def test_a_path_hint_is_only_a_hint(minilm, tiny_bert):
    config = minilm.config()
    for hint in (str(tiny_bert), "/no/such/folder", ""):
        again = Embedder.from_config({**config, "path_hint": hint})
        assert again.contract == minilm.contract
        assert again.model_path == minilm.model_path  # found by its digest, not the hint


@pytest.mark.parametrize(
    "bad",
    [None, [], "contract", {"path_hint": "x"}, {"contract": {}}, {"contract": None}],
)
def test_a_config_that_is_not_one_is_a_data_format_error(bad):
    with pytest.raises(DataFormatError):
        Embedder.from_config(bad)


def test_unknown_config_keys_are_named(minilm):
    with pytest.raises(DataFormatError, match="'colour'"):
        Embedder.from_config({**minilm.config(), "colour": "blue"})


def test_chroma_configs_written_before_the_embedder_config_still_build(minilm):
    from ctxemb_chroma import ContractEmbeddingFunction

    old = {
        "contract": minilm.contract.to_dict(),
        "fingerprint": minilm.fingerprint,
        "path_hint": str(minilm.model_path),
    }
    ef = ContractEmbeddingFunction.build_from_config(old)
    assert ef.contract == minilm.contract
    again = ContractEmbeddingFunction.build_from_config(ef.get_config())
    assert again.contract == minilm.contract


def _pages(records, size):
    for start in range(0, len(records), size):
        chunk = records[start : start + size]
        yield Page([r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk])


def test_copy_missing_writes_only_what_the_target_lacks_and_resumes():
    records = [(f"d{k}", f"text {k}", {"k": k} if k % 2 else None) for k in range(7)]
    written: list[tuple[list[str], list[str], object]] = []

    def write(ids, docs, metas):
        written.append((ids, docs, metas))

    done = {"d1", "d4"}
    n = copy_missing(_pages(records, 3), write, done, total=7, progress=False)
    assert n == 5
    assert [i for ids, _, _ in written for i in ids] == ["d0", "d2", "d3", "d5", "d6"]
    assert written[0] == (["d0", "d2"], ["text 0", "text 2"], None)  # no metadata: None
    assert written[1] == (["d3", "d5"], ["text 3", "text 5"], [{"k": 3}, {"k": 5}])
    assert copy_missing(_pages(records, 3), write, {r[0] for r in records}, total=7) == 0


def test_copy_missing_refuses_records_without_text_naming_them():
    records = [("a", "text", None), ("b", None, None)]
    with pytest.raises(InvalidInputError, match=r"\['b'\].*no stored text"):
        copy_missing(_pages(records, 5), lambda *a: None, set(), total=2, progress=False)
    with pytest.raises(InvalidInputError, match="total"):
        copy_missing([], lambda *a: None, set(), total=-1)


# -- pieces the framework adapters share --------------------------------------------------------


def test_config_for_matches_config_without_loading_anything(minilm, minilm_contract, tiny_bert):
    assert Embedder.config_for(minilm_contract) == minilm.config()
    settings = {"backend": "torch", "batch_size": 8, "token_budget": 512}
    given = Embedder.config_for(minilm_contract, path=tiny_bert, **settings)
    assert given["path_hint"] == str(tiny_bert)  # as given: the digest decides at build time
    assert {k: given[k] for k in settings} == settings
    with pytest.raises(InvalidInputError, match="EmbeddingContract"):
        Embedder.config_for(minilm_contract.to_dict())  # type: ignore[arg-type]


def test_config_for_leaves_out_a_folder_it_cannot_locate(minilm_contract):
    nowhere = minilm_contract.with_(model="nobody/unknown-model", weights="sha256:" + "0" * 64)
    assert Embedder.config_for(nowhere)["path_hint"] is None


def test_load_contract_reads_a_contract_its_dict_or_its_json_file(minilm_contract, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(minilm_contract.to_json())
    for given in (minilm_contract, minilm_contract.to_dict(), path, str(path)):
        assert load_contract(given) == minilm_contract
    with pytest.raises(DataFormatError, match="cannot read the contract file"):
        load_contract(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="cannot be parsed"):
        load_contract(tmp_path / "bad.json")
    with pytest.raises(DataFormatError, match="got int"):
        load_contract(7)


def test_similarity_gives_one_meaning_per_contract(minilm_contract):
    raw = minilm_contract.with_(normalize=False)
    np.testing.assert_allclose(similarity([0.25, 1.5], "cosine", minilm_contract), [0.75, -0.5])
    np.testing.assert_allclose(similarity([0.25], "ip", raw), [0.75])
    # On unit vectors |a - b|^2 = 2 - 2 cos: the squared L2 distance becomes the cosine.
    np.testing.assert_allclose(similarity([0.5], "l2", minilm_contract), [0.75])
    np.testing.assert_allclose(similarity([0.5], "l2", raw), [-0.5])
    with pytest.raises(InvalidInputError, match="unknown distance space"):
        similarity([0.5], "hamming", minilm_contract)


def test_check_embedded_names_the_first_bad_vector(minilm_contract):
    good = [0.1] * minilm_contract.output_dim
    rows = check_embedded([good, good], minilm_contract, ["a", "b"])
    assert rows.shape == (2, 384) and rows.dtype == np.float32
    cases = [
        ([good, None], "'b' has no embedding"),
        ([good, [0.1] * 12], r"'b': its embedding has shape \(12,\)"),
        ([good, [*good[:-1], float("nan")]], "'b': its embedding holds NaN"),
        ([good, ["x"] * 384], "'b': its embedding is not a list of numbers"),
        ([good], "2 records to write and 1 vectors"),
    ]
    for vectors, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            check_embedded(vectors, minilm_contract, ["a", "b"])


@pytest.mark.transport
def test_add_embedded_writes_only_the_stamps_vectors(client, minilm, minilm_contract):
    from ctxemb_chroma import open_collection

    collection = open_collection(client, fresh_name(), minilm)
    texts = list(DOCS.values())
    vectors = minilm.embed_documents(texts)
    collection.add_embedded(list(DOCS), vectors, texts, fingerprint=minilm_contract.fingerprint)
    assert collection.count() == len(DOCS)
    other = minilm_contract.with_(pooling="cls")
    remember(other)
    with pytest.raises(ContractMismatchError) as info:
        collection.add_embedded(["x"], vectors[:1], ["x"], fingerprint=other.fingerprint)
    assert info.value.fields == ("pooling",)
    with pytest.raises(ExistingIdsError):
        collection.add_embedded(
            ["tea", "new"], vectors[:2], texts[:2], fingerprint=minilm_contract.fingerprint
        )
    with pytest.raises(InvalidInputError, match="shape"):
        collection.add_embedded(
            ["new"], [vectors[0][:10]], ["x"], fingerprint=minilm_contract.fingerprint
        )
    assert collection.count() == len(DOCS) and "new" not in collection.ids()
    collection.add_embedded(
        ["tea"], vectors[1:2], [texts[1]], fingerprint=minilm_contract.fingerprint, upsert=True
    )
    stored = collection.get(ids=["tea"], include=["documents"])
    assert stored["documents"] == [texts[1]]


def test_a_lazy_embedder_builds_once_on_first_use(minilm_contract, minilm):
    import threading

    from ctxemb_core.documents import recall
    from ctxemb_core.lazy import LazyEmbedder

    other = minilm_contract.with_(query_prefix="query: ")
    lazy = LazyEmbedder(other.to_dict(), batch_size=16)
    assert not lazy.loaded and lazy.contract == other and recall(other.fingerprint) == other
    assert lazy.config == Embedder.config_for(other, batch_size=16)
    built: list[Embedder] = []
    threads = [threading.Thread(target=lambda: built.append(lazy.get())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert lazy.loaded and all(e is built[0] for e in built) and built[0].batch_size == 16
    np.testing.assert_allclose(
        lazy.embed_query("tea"), Embedder(other).embed_query("tea"), atol=1e-6
    )
    assert lazy.embed_documents(TEXTS).dtype == np.float32


def test_a_lazy_embedder_returns_the_stored_form_of_binary_vectors(minilm_contract):
    from ctxemb_core.lazy import LazyEmbedder

    lazy = LazyEmbedder(minilm_contract.with_(precision="binary"))
    rows = lazy.embed_documents(TEXTS)
    assert rows.shape == (2, 384) and set(np.unique(rows)) <= {-1.0, 1.0}
