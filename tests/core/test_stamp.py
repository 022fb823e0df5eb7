"""The index stamp: flat metadata, verification, mismatches named by field, drift caught."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import MINILM
from samples import altered_weights_folder
from tiny_models import build_bert

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp, contract_for
from ctxemb_core.embedder import _ENCODERS
from ctxemb_core.errors import (
    ContractMismatchError,
    DataFormatError,
    EncoderDriftError,
    MissingStampError,
    StampError,
)
from ctxemb_core.stamp import CANARY_TOLERANCE, PROBES


@pytest.fixture(scope="module")
def stamp(minilm) -> IndexStamp:
    return IndexStamp.from_embedder(minilm)


def test_metadata_is_flat_and_round_trips(stamp, minilm_contract):
    md = stamp.to_metadata()
    assert all(k.startswith("ctxemb:") for k in md)
    assert all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in md.values())
    assert md["ctxemb:fingerprint"] == minilm_contract.fingerprint
    assert EmbeddingContract.from_json(md["ctxemb:contract"]) == minilm_contract
    back = IndexStamp.from_metadata({**md, "hnsw:space": "cosine"})
    assert back.contract == minilm_contract and back.probes == PROBES
    np.testing.assert_array_equal(back.canary, stamp.canary)
    assert back.canary.shape == (2 * len(PROBES), 384)


def test_verify_passes_for_the_same_contract(stamp, minilm):
    check = stamp.verify(minilm)
    assert check.fingerprint == minilm.fingerprint and check.min_cosine > 0.99999


def test_same_contract_rebuilt_in_a_new_process_verifies_clean(stamp):
    code = (
        "import json,sys\n"
        "from ctxemb_core import Embedder, IndexStamp, contract_for\n"
        "e = Embedder(contract_for('sentence-transformers/all-MiniLM-L6-v2'))\n"
        "check = IndexStamp.from_metadata(json.load(sys.stdin)).verify(e)\n"
        "print(check.min_cosine)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(stamp.to_metadata()),
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(out.stdout) > 0.99999


CHANGES = {
    "pooling": lambda: contract_for(MINILM, pooling="cls"),
    "normalize": lambda: contract_for(MINILM, normalize=False),
    "query_prefix": lambda: contract_for(MINILM, query_prefix="query: "),
    "document_prefix": lambda: contract_for(MINILM, document_prefix="passage: "),
    "truncate_dim": lambda: contract_for(MINILM, truncate_dim=128),
    "max_tokens": lambda: contract_for(MINILM, max_tokens=128),
}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_each_changed_field_is_refused_and_named(stamp, field):
    other = CHANGES[field]()
    assert other.fingerprint != stamp.fingerprint
    with pytest.raises(ContractMismatchError) as info:
        stamp.verify(Embedder(other))
    err = info.value
    assert err.fields == (field,)
    assert err.index == stamp.contract and err.caller == other
    assert f"{field}: index=" in str(err) and "caller=" in str(err)


@pytest.fixture(scope="module")
def altered(tmp_path_factory):
    """MiniLM's name and shapes, other weights (read only by the tests here)."""
    return altered_weights_folder(tmp_path_factory.mktemp("altered"))


def test_same_name_with_altered_weights_is_refused_naming_weights(stamp, altered):
    other = contract_for(altered, name=MINILM)
    assert other.model == stamp.contract.model
    with pytest.raises(ContractMismatchError) as info:
        # The refusal is the contract's, whatever serves it: the torch backend spares the ONNX
        # export of these weights (seconds) that backend="auto" would make first.
        stamp.verify(Embedder(other, backend="torch"))
    assert info.value.fields == ("weights",)


def test_a_folder_that_no_longer_matches_its_contract_is_refused(minilm_contract, altered):
    # The contract pins a digest; an embedder pointed at other bytes under that contract refuses.
    with pytest.raises(ContractMismatchError) as info:
        Embedder(minilm_contract.with_(pooling="max"), path=altered)
    assert info.value.fields == ("weights",)


def test_another_encoder_of_the_same_width_is_refused(stamp, tmp_path):
    folder = build_bert(tmp_path / "w384", hidden=384, layers=1, heads=6, max_position=512)
    other = contract_for(folder, pooling="mean", name="acme/tiny-384", max_tokens=256)
    assert other.dimension == stamp.contract.dimension
    with pytest.raises(ContractMismatchError) as info:
        stamp.verify(Embedder(other, backend="torch"))  # refused by contract, as above
    assert info.value.fields == ("model", "weights")


def test_drift_under_the_same_contract_is_caught_by_the_canary(tmp_path):
    folder = build_bert(tmp_path / "drift", seed=5)
    contract = contract_for(folder, pooling="mean")
    embedder = Embedder(contract, backend="torch")
    stamp = IndexStamp.from_embedder(embedder)
    assert stamp.verify(embedder).min_cosine > 0.99999
    # Same digest on disk, other numbers in memory: what a changed library or lossy backend does.
    model = _ENCODERS[(contract.weights, "torch", "cpu")][0].model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    with pytest.raises(EncoderDriftError) as info:
        stamp.verify(embedder)
    assert info.value.min_cosine < CANARY_TOLERANCE and "canary probe" in str(info.value)


def test_missing_and_damaged_stamps(stamp):
    with pytest.raises(MissingStampError):
        IndexStamp.from_metadata({"hnsw:space": "cosine"})
    with pytest.raises(MissingStampError):
        IndexStamp.from_metadata(None)
    md = stamp.to_metadata()
    for key in ("ctxemb:contract", "ctxemb:canary", "ctxemb:probes", "ctxemb:schema"):
        broken = {k: v for k, v in md.items() if k != key}
        with pytest.raises(DataFormatError, match=key):
            IndexStamp.from_metadata(broken)
    with pytest.raises(DataFormatError, match="damaged"):
        IndexStamp.from_metadata({**md, "ctxemb:fingerprint": "0" * 64})
    with pytest.raises(DataFormatError, match="canary has 3 bytes"):
        IndexStamp.from_metadata({**md, "ctxemb:canary": "f32le:AAAA"})
    with pytest.raises(DataFormatError, match="contract"):
        IndexStamp.from_metadata({**md, "ctxemb:contract": "{}"})
    assert issubclass(MissingStampError, StampError)


def test_check_contract_is_the_cheap_per_call_guard(stamp, minilm_contract):
    stamp.check_contract(minilm_contract)
    with pytest.raises(ContractMismatchError, match="Only the query side"):
        stamp.check_contract(minilm_contract.with_(query_prefix="query: "))


def test_a_name_over_the_same_weights_passes_the_stamp_and_its_canary(stamp, minilm_contract):
    renamed = minilm_contract.with_(model="acme/minilm-copy")
    stamp.check_contract(renamed)
    assert stamp.verify(Embedder(renamed)).min_cosine >= CANARY_TOLERANCE
    # The stamp itself stays the index's; a name with a real change is still refused.
    assert stamp.contract == minilm_contract
    with pytest.raises(ContractMismatchError, match="query_prefix") as info:
        stamp.check_contract(renamed.with_(query_prefix="query: "))
    assert info.value.stamped and info.value.diff.kind.value == "query_only"


def test_mismatch_errors_pickle_with_their_context(stamp, minilm_contract):
    import pickle

    err = ContractMismatchError(stamp.contract, minilm_contract.with_(pooling="cls"))
    back = pickle.loads(pickle.dumps(err))
    assert back.fields == ("pooling",) and str(back) == str(err)
