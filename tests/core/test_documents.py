"""Document-level stamps: what a document of a store without collection metadata carries and how
a retrieved result is checked against the caller's contract (ctxemb_core.documents), and the
mismatch error raised from fingerprints alone."""

from __future__ import annotations

import pickle
from collections import OrderedDict

import pytest

from ctxemb_core import documents as documents_module
from ctxemb_core.contract import DiffKind
from ctxemb_core.documents import (
    FINGERPRINT_KEY,
    batch_fingerprint,
    check_documents,
    check_fingerprint,
    recall,
    remember,
    stamp_meta,
)
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    InvalidInputError,
    MissingStampError,
    StampError,
)


@pytest.fixture(scope="module")
def cls_contract(minilm_contract):
    return minilm_contract.with_(pooling="cls")


@pytest.fixture
def forget(monkeypatch):
    """A process that built none of the contracts (as when another process wrote the store)."""
    monkeypatch.setattr(documents_module, "_SEEN", OrderedDict())


# -- stamping on write ---------------------------------------------------------------------------


def test_stamp_returns_a_new_dict_with_the_fingerprint_and_leaves_the_input_alone(minilm_contract):
    meta = {"title": "Aspirin", "tags": ["a"]}
    before = {"title": "Aspirin", "tags": ["a"]}
    stamped = stamp_meta(meta, minilm_contract)
    assert stamped == {**before, FINGERPRINT_KEY: minilm_contract.fingerprint}
    assert stamped is not meta and meta == before and FINGERPRINT_KEY not in meta
    assert FINGERPRINT_KEY == "ctxemb_fingerprint"


def test_stamping_twice_under_the_same_contract_is_a_copy(minilm_contract):
    once = stamp_meta({}, minilm_contract)
    twice = stamp_meta(once, minilm_contract)
    assert twice == once and twice is not once


def test_a_none_under_the_key_counts_as_no_stamp(minilm_contract):
    stamped = stamp_meta({FINGERPRINT_KEY: None, "n": 1}, minilm_contract)
    assert stamped == {FINGERPRINT_KEY: minilm_contract.fingerprint, "n": 1}


def test_a_document_of_another_contract_is_refused_on_write(minilm_contract, cls_contract):
    meta = stamp_meta({"title": "x"}, cls_contract)
    documents_module._SEEN.clear()  # written by another process
    frozen = dict(meta)
    with pytest.raises(ContractMismatchError) as info:
        stamp_meta(meta, minilm_contract)
    err = info.value
    assert err.index is None and err.caller == minilm_contract
    assert err.index_fingerprint == cls_contract.fingerprint
    assert err.fields == ("fingerprint",)
    assert meta == frozen  # nothing was stamped


def test_a_damaged_fingerprint_is_refused_on_write(minilm_contract):
    for value in ("abc", minilm_contract.fingerprint.upper(), 42):
        with pytest.raises(DamagedStampError, match=FINGERPRINT_KEY):
            stamp_meta({FINGERPRINT_KEY: value}, minilm_contract)


# -- the check on read ---------------------------------------------------------------------------


def test_documents_of_the_callers_contract_pass(minilm_contract):
    metas = [stamp_meta({"i": i}, minilm_contract) for i in range(3)]
    assert check_documents(metas, minilm_contract) is None
    assert check_documents([], minilm_contract) is None  # an empty result returns nothing wrong


def test_another_contract_without_its_contract_names_both_fingerprints(
    minilm_contract, cls_contract
):
    metas = [stamp_meta({}, cls_contract), stamp_meta({}, cls_contract)]
    documents_module._SEEN.clear()  # written by another process
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, minilm_contract, ids=["d1", "d2"])
    err = info.value
    assert err.index is None and err.fields == ("fingerprint",)
    assert err.documents == ("d1", "d2")
    assert err.diff.kind is DiffKind.REEMBED and err.diff.fields == ("fingerprint",)
    assert err.diff.changes[0].index == cls_contract.fingerprint
    assert err.diff.changes[0].caller == minilm_contract.fingerprint
    text = str(err)
    assert cls_contract.fingerprint[:12] in text and minilm_contract.fingerprint[:12] in text
    assert "cannot be named" in text and "'d1', 'd2'" in text and "2 stored document(s)" in text


@pytest.mark.parametrize(
    "changes",
    [
        {"pooling": "cls"},
        {"query_prefix": "query: "},
        {"normalize": False},
        {"truncate_dim": 128},
    ],
)
def test_another_known_contract_names_the_differing_fields(minilm_contract, changes):
    other = minilm_contract.with_(**changes)
    metas = [stamp_meta({}, other)]
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, minilm_contract, known={other.fingerprint: other})
    err = info.value
    (field,) = changes
    assert err.fields == (field,) and err.index == other and err.caller == minilm_contract
    assert err.index_fingerprint == other.fingerprint
    assert f"{field}: index=" in str(err) and err.documents == (0,)
    assert "positions 0" in str(err)


def test_a_document_without_a_fingerprint_was_written_around_ctxemb(minilm_contract):
    metas = [stamp_meta({}, minilm_contract), {"title": "raw"}, {FINGERPRINT_KEY: None}]
    with pytest.raises(MissingStampError, match="around ctxemb") as info:
        check_documents(metas, minilm_contract)
    assert "2 of 3 retrieved documents" in str(info.value)
    assert "positions 1, 2" in str(info.value)
    assert isinstance(info.value, StampError)


def test_a_damaged_fingerprint_on_read_is_named_by_id(minilm_contract):
    metas = [stamp_meta({}, minilm_contract), {FINGERPRINT_KEY: "not-a-fingerprint"}]
    with pytest.raises(DamagedStampError) as info:
        check_documents(metas, minilm_contract, ids=["good", "bad"])
    assert "1 of 2" in str(info.value) and "ids 'bad'" in str(info.value)


def test_a_mixed_result_is_refused_whole_and_the_most_specific_error_wins(
    minilm_contract, cls_contract
):
    mean_ok = stamp_meta({}, minilm_contract)
    other = minilm_contract.with_(max_tokens=128)
    metas = [
        mean_ok,
        {},  # missing
        stamp_meta({}, other),  # foreign, unknown
        {FINGERPRINT_KEY: "0"},  # damaged
        stamp_meta({}, cls_contract),  # foreign, known
        stamp_meta({}, other),
    ]
    ids = ["a", "b", "c", "d", "e", "f"]
    documents_module._SEEN.clear()  # written by another process
    # Unknown foreign contracts: the first seen is reported, with every document carrying it.
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, minilm_contract, ids=ids)
    assert info.value.index_fingerprint == other.fingerprint
    assert info.value.documents == ("c", "f")
    # A known foreign contract is reported first: its fields can be named.
    known = {cls_contract.fingerprint: cls_contract}
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, minilm_contract, ids=ids, known=known)
    assert info.value.fields == ("pooling",) and info.value.documents == ("e",)
    # Without foreign documents, damage outranks a missing stamp; one bad document is enough.
    with pytest.raises(DamagedStampError):
        check_documents([mean_ok, {}, {FINGERPRINT_KEY: "0"}], minilm_contract)
    with pytest.raises(MissingStampError):
        check_documents([mean_ok] * 9 + [{}], minilm_contract)


def test_many_documents_are_counted_and_the_list_is_shortened(minilm_contract, cls_contract):
    metas = [stamp_meta({}, cls_contract)] * 8
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, minilm_contract)
    assert len(info.value.documents) == 8
    assert "8 stored document(s)" in str(info.value) and "0, 1, 2, 3, 4 …" in str(info.value)


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metas, match",
    [
        (None, "metas must be a list"),
        ({"title": "x"}, "wrap a single metadata in a list"),
        ("text", "metas must be a list"),
        (iter([{}]), "metas must be a list"),
        ([{}, None], r"metas\[1\] must be a metadata mapping"),
        ([["title", "x"]], r"metas\[0\] must be a metadata mapping"),
    ],
)
def test_bad_metas_are_named(minilm_contract, metas, match):
    with pytest.raises(InvalidInputError, match=match):
        check_documents(metas, minilm_contract)


def test_bad_meta_and_contract_on_write_are_named(minilm, minilm_contract):
    for meta in (None, [("title", "x")], "title"):
        with pytest.raises(InvalidInputError, match="meta must be a metadata mapping"):
            stamp_meta(meta, minilm_contract)
    with pytest.raises(InvalidInputError, match=r"pass embedder\.contract"):
        stamp_meta({}, minilm)
    for contract in (None, minilm_contract.fingerprint, minilm_contract.to_dict()):
        with pytest.raises(InvalidInputError, match="contract must be an EmbeddingContract"):
            stamp_meta({}, contract)
    for contract in (None, "abc", minilm_contract.to_dict()):
        with pytest.raises(InvalidInputError, match="contract must be an EmbeddingContract"):
            check_documents([], contract)


def test_bad_ids_and_known_are_named(minilm_contract, cls_contract):
    metas = [stamp_meta({}, minilm_contract)]
    with pytest.raises(InvalidInputError, match="ids has 2 items and metas 1"):
        check_documents(metas, minilm_contract, ids=["a", "b"])
    with pytest.raises(InvalidInputError, match="wrap a single id"):
        check_documents(metas, minilm_contract, ids="a")
    with pytest.raises(InvalidInputError, match=r"ids\[0\]"):
        check_documents(metas, minilm_contract, ids=[7])
    with pytest.raises(InvalidInputError, match="known must be a mapping"):
        check_documents(metas, minilm_contract, known=[cls_contract])
    with pytest.raises(InvalidInputError, match="must be an EmbeddingContract"):
        check_documents(metas, minilm_contract, known={cls_contract.fingerprint: "cls"})
    # A key that is not its contract's fingerprint would name the fields of another recipe.
    with pytest.raises(InvalidInputError, match="key each contract by its own fingerprint"):
        check_documents(metas, minilm_contract, known={minilm_contract.fingerprint: cls_contract})


def test_from_fingerprints_refuses_what_is_not_a_fingerprint_or_contract(minilm_contract):
    for bad in (None, "abc", minilm_contract.fingerprint.upper()):
        with pytest.raises(InvalidInputError, match="index_fingerprint"):
            ContractMismatchError.from_fingerprints(bad, minilm_contract)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="caller must be a contract fingerprint"):
        ContractMismatchError.from_fingerprints("ab" * 32, minilm_contract.to_dict())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="both contracts are known"):
        ContractMismatchError.from_fingerprints(minilm_contract, minilm_contract)


# -- the error's two forms -----------------------------------------------------------------------


def test_the_two_contract_form_is_unchanged_without_documents(minilm_contract, cls_contract):
    err = ContractMismatchError(minilm_contract, cls_contract)
    assert err.index == minilm_contract and err.documents == ()
    assert err.index_fingerprint == minilm_contract.fingerprint
    assert str(err).endswith("or migrate the index by re-embedding.")


@pytest.mark.parametrize("form", ["contracts", "fingerprints"])
@pytest.mark.parametrize("documents", [(), ("d1", "d2"), (0, 3)])
def test_both_forms_pickle_with_every_attribute(minilm_contract, cls_contract, form, documents):
    if form == "contracts":
        err = ContractMismatchError(cls_contract, minilm_contract, documents=documents)
    else:
        err = ContractMismatchError.from_fingerprints(
            cls_contract.fingerprint, minilm_contract, documents=documents
        )
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ContractMismatchError and str(back) == str(err)
    for name in ("index", "caller", "index_fingerprint", "diff", "fields", "documents"):
        assert getattr(back, name) == getattr(err, name), name


# -- contracts this process built: fingerprints named in full -------------------------------------


def test_a_contract_stamped_in_this_process_names_the_fields(minilm_contract):
    other = minilm_contract.with_(query_prefix="query: ")
    metas = [stamp_meta({}, other)]
    assert recall(other.fingerprint) == other
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, minilm_contract)
    assert info.value.fields == ("query_prefix",) and info.value.index == other


def test_a_caller_given_by_fingerprint_is_checked_like_a_contract(minilm_contract, forget):
    other = minilm_contract.with_(pooling="cls")
    metas = [stamp_meta({}, minilm_contract)]
    check_documents(metas, minilm_contract.fingerprint)  # the same contract passes
    forget_all = documents_module._SEEN
    forget_all.clear()
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, other.fingerprint)
    err = info.value
    assert err.index is None and err.caller is None and err.fields == ("fingerprint",)
    assert err.caller_fingerprint == other.fingerprint
    assert "neither contract was" in str(err)
    remember(other)
    remember(minilm_contract)
    with pytest.raises(ContractMismatchError) as info:
        check_documents(metas, other.fingerprint)
    assert info.value.fields == ("pooling",)


def test_check_fingerprint_names_fields_when_the_caller_was_built_here(minilm_contract, forget):
    other = minilm_contract.with_(normalize=False)
    assert check_fingerprint(minilm_contract.fingerprint, minilm_contract) is minilm_contract
    with pytest.raises(ContractMismatchError) as info:
        check_fingerprint(other.fingerprint, minilm_contract)
    err = info.value
    assert err.index == minilm_contract and err.caller is None and err.fields == ("fingerprint",)
    assert "the caller's contract was not built in this process" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.caller_fingerprint == other.fingerprint
    remember(other)
    with pytest.raises(ContractMismatchError) as info:
        check_fingerprint(other.fingerprint, minilm_contract)
    assert info.value.fields == ("normalize",) and info.value.caller == other
    for bad in (None, "abc", 7):
        with pytest.raises(DamagedStampError, match="not a contract fingerprint"):
            check_fingerprint(bad, minilm_contract)  # type: ignore[arg-type]


def test_batch_fingerprint_is_the_one_contract_of_a_batch(minilm_contract, forget):
    other = minilm_contract.with_(truncate_dim=128)
    assert batch_fingerprint([]) is None
    mine = [stamp_meta({"i": i}, minilm_contract) for i in range(3)]
    assert batch_fingerprint(mine, ["a", "b", "c"]) == minilm_contract.fingerprint
    with pytest.raises(MissingStampError, match="'b' carries no"):
        batch_fingerprint([mine[0], {"i": 1}], ["a", "b"])
    with pytest.raises(DamagedStampError, match="document 1"):
        batch_fingerprint([mine[0], {FINGERPRINT_KEY: "x"}])
    mixed = [*mine, stamp_meta({}, other)]
    with pytest.raises(ContractMismatchError) as info:
        batch_fingerprint(mixed, ["a", "b", "c", "d"])
    assert info.value.fields == ("truncate_dim",) and info.value.documents == ("d",)
    documents_module._SEEN.clear()
    with pytest.raises(ContractMismatchError) as info:
        batch_fingerprint(mixed)
    assert info.value.fields == ("fingerprint",) and info.value.documents == (3,)


def test_store_sample_is_the_first_and_last_records():
    from ctxemb_core.documents import STORE_SAMPLE, store_sample

    records = {i: f"r{i}" for i in range(40)}
    half = STORE_SAMPLE // 2
    assert store_sample(records.values()) == [
        f"r{i}" for i in [*range(half), *range(39, 39 - half, -1)]
    ]
    small = {i: i for i in range(STORE_SAMPLE)}
    assert store_sample(small.values()) == list(range(STORE_SAMPLE))  # no record twice
    assert store_sample({}.values()) == []


def test_a_label_only_difference_passes_the_per_document_checks():
    # Stores without collection metadata check a fingerprint per document; a contract that only
    # names the same weights differently makes the same vectors, so it is not refused there.
    from ctxemb_core import contract_for
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
