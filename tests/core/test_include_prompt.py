"""Instruction tokens outside the pooling (the Instructor row): ``include_prompt=False``.

sentence-transformers' ``Pooling(include_prompt=False)`` lets the network read the instruction
but pools only the text's own tokens. ctxemb pins that in the contract and reproduces it on both
backends: the vectors equal ``SentenceTransformer.encode(..., prompt_name=...)`` on a tiny model
saved with that pooling, and a folder saved so is served, no longer refused.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import build_bert

from ctxemb_core import DiffKind, Embedder, EmbeddingContract, IndexStamp, contract_for
from ctxemb_core.cli import main
from ctxemb_core.errors import ContractMismatchError, InvalidContractError

# The long text is cut at max_seq_length on purpose (the prompt and text are cut together).
pytestmark = pytest.mark.filterwarnings("ignore::ctxemb_core.errors.TruncationWarning")

PROMPTS = {
    "query": "Represent the question for retrieving supporting documents: ",
    "document": "Represent the document for retrieval: ",
}
TEXTS = [
    "where do rivers flow",
    "The central bank raised interest rates again.",
    "cat",
    # Cut by max_seq_length: the prompt and the text are truncated together.
    " ".join(["the river bank and the money bank"] * 12),
]


def build_instructor(path, *, pooling="mean", prompts=PROMPTS, seed=0):
    """A tiny Instructor-style folder: Transformer, Pooling(include_prompt=False), Normalize,
    saved by sentence-transformers with its prompts; returns the folder and the loaded model."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    bert = build_bert(path.parent / f"{path.name}-bert", seed=seed)
    modules = [
        Transformer(str(bert), max_seq_length=24),
        Pooling(32, pooling_mode=pooling, include_prompt=False),
        Normalize(),
    ]
    model = SentenceTransformer(modules=modules, device="cpu", prompts=prompts)
    model.save(str(path), create_model_card=False)
    return path, SentenceTransformer(str(path), device="cpu")


@pytest.fixture(scope="module")
def instructor(tmp_path_factory):
    return build_instructor(tmp_path_factory.mktemp("instructor") / "mean")


def test_the_folder_is_read_into_the_contract_not_refused(instructor):
    folder, _ = instructor
    config = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert config["include_prompt"] is False
    c = contract_for(folder)
    assert c.include_prompt is False
    assert (c.query_prefix, c.document_prefix) == (PROMPTS["query"], PROMPTS["document"])
    assert c.to_dict()["include_prompt"] is False and "include_prompt=False" in c.describe()
    assert EmbeddingContract.from_json(c.to_json()) == c
    # Asked for explicitly, the default comes back, with the fingerprint of a contract made
    # before the field existed (no key in its JSON).
    pooled = contract_for(folder, include_prompt=True)
    assert "include_prompt" not in pooled.to_dict()
    assert pooled.fingerprint != c.fingerprint


@pytest.mark.parametrize("backend", ["torch", "onnx"])
@pytest.mark.parametrize(
    "pooling", ["mean", "cls", "weightedmean", "lasttoken", "max", "mean_sqrt_len_tokens"]
)
def test_vectors_equal_sentence_transformers_with_the_prompt_left_out(
    tmp_path_factory, backend, pooling
):
    folder, st = build_instructor(tmp_path_factory.mktemp("instructor") / pooling, pooling=pooling)
    contract = contract_for(folder)
    emb = Embedder(contract, backend=backend)
    for role in ("query", "document"):
        want = st.encode(TEXTS, prompt_name=role, convert_to_numpy=True)
        got = emb.embed(TEXTS, role)
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{role}, {pooling}")
    # Pooling the prompt too gives other vectors (the contract decides, not the folder alone),
    # but for the last token, which is the text's either way.
    pooled = Embedder(contract.with_(include_prompt=True), backend=backend)
    gap = np.abs(pooled.embed_queries(TEXTS) - emb.embed_queries(TEXTS)).max()
    assert gap == 0 if pooling == "lasttoken" else gap > 1e-3


@pytest.mark.parametrize("pooling", ["weightedmean", "cls"])
def test_left_padding_leaves_out_the_padding_and_the_prompt(tmp_path, pooling):
    from sentence_transformers import SentenceTransformer

    folder, _ = build_instructor(tmp_path / "left", pooling=pooling, seed=6)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "padding_side": "left"}))
    st = SentenceTransformer(str(folder), device="cpu")
    assert st.tokenizer.padding_side == "left"
    emb = Embedder(contract_for(folder), backend="torch")
    for role in ("query", "document"):
        want = st.encode(TEXTS, prompt_name=role, convert_to_numpy=True)
        np.testing.assert_allclose(emb.embed(TEXTS, role), want, atol=1e-5)


def test_the_prompt_given_at_encode_time_is_left_out_as_well(instructor):
    folder, st = instructor
    prompt = "Represent the science title: "
    emb = Embedder(contract_for(folder, query_prefix=prompt), backend="torch")
    want = st.encode(TEXTS, prompt=prompt, convert_to_numpy=True)
    np.testing.assert_allclose(emb.embed_queries(TEXTS), want, atol=1e-5)


def test_an_empty_document_prefix_changes_nothing(tmp_path):
    folder, st = build_instructor(
        tmp_path / "no-doc-prompt", prompts={"query": PROMPTS["query"], "document": ""}, seed=4
    )
    contract = contract_for(folder)
    assert contract.document_prefix == "" and contract.include_prompt is False
    docs = Embedder(contract, backend="torch").embed_documents(TEXTS)
    pooled = Embedder(contract.with_(include_prompt=True), backend="torch")
    np.testing.assert_array_equal(docs, pooled.embed_documents(TEXTS))
    np.testing.assert_allclose(docs, st.encode(TEXTS, convert_to_numpy=True), atol=1e-5)
    # So the change is a query-side one there, and a re-embed where documents have a prefix.
    assert contract.diff(contract.with_(include_prompt=True)).kind is DiffKind.QUERY_ONLY
    with_doc = contract.with_(document_prefix="passage: ")
    assert with_doc.diff(with_doc.with_(include_prompt=True)).kind is DiffKind.REEMBED


def test_token_vectors_are_the_same_either_way(instructor):
    # embed_tokens always drops the prefix's tokens: pooling is all include_prompt changes.
    folder, _ = instructor
    contract = contract_for(folder)
    a = Embedder(contract, backend="torch").embed_tokens("where do rivers flow", role="query")
    b = Embedder(contract.with_(include_prompt=True), backend="torch").embed_tokens(
        "where do rivers flow", role="query"
    )
    assert a.tokens == b.tokens == ["where", "do", "rivers", "flow"]
    np.testing.assert_array_equal(a.vectors, b.vectors)


def test_an_export_keeps_the_pooling_without_the_prompt(instructor, tmp_path):
    from ctxemb_core.export import export_contract, export_model

    folder, st = instructor
    contract = contract_for(folder)
    export = export_model(contract, tmp_path / "export")
    assert export_contract(export) == contract
    emb = Embedder.from_export(export)
    want = st.encode(TEXTS, prompt_name="query", convert_to_numpy=True)
    np.testing.assert_allclose(emb.embed_queries(TEXTS), want, atol=1e-5)


def test_a_stamp_refuses_a_caller_that_pools_the_prompt_naming_the_field(instructor):
    folder, _ = instructor
    contract = contract_for(folder)
    stamp = IndexStamp.from_embedder(Embedder(contract, backend="torch"))
    with pytest.raises(ContractMismatchError) as info:
        stamp.verify(Embedder(contract.with_(include_prompt=True), backend="torch"))
    assert info.value.fields == ("include_prompt",)
    assert "include_prompt: index=False, caller=True" in str(info.value)


def test_the_cli_flag_and_invalid_values(instructor, capsys):
    folder, _ = instructor
    assert main(["inspect", str(folder), "--include-prompt"]) == 0
    assert "include_prompt" not in json.loads(capsys.readouterr().out)["contract"]
    assert main(["inspect", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out)["contract"]["include_prompt"] is False
    with pytest.raises(InvalidContractError, match="include_prompt must be True or False"):
        contract_for(folder).with_(include_prompt="no")
