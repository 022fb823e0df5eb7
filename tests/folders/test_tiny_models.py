"""Checks that the tiny in-code model folders load like real downloaded models."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# Never reach for a model hub: these folders are all local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from tiny_models import (
    DECODER_SPECIAL_TOKENS,
    POOLING_MODES,
    VOCAB,
    build_bert,
    build_decoder,
    build_dpr_pair,
    build_sentence_transformer,
)
from transformers import AutoModel, AutoTokenizer

SENTENCES = [
    "The bank raised interest rates.",
    "We sat on the river bank.",
    "query: what is a cat",
    "passage: cats are animals",
    "Represent this sentence for searching relevant passages: 42, 7!",
]


def _hidden_states(folder: Path, texts: list[str]) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).last_hidden_state


def _read_json(file: Path) -> object:
    return json.loads(file.read_text(encoding="utf-8"))


def test_vocab_shape() -> None:
    assert VOCAB[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(VOCAB) == len(set(VOCAB))
    for word in ("query", "passage", ":", "represent", "this", "sentence", "for", "##s", "##ing"):
        assert word in VOCAB


def test_bert_loads_and_tokenizes(tmp_path: Path) -> None:
    folder = build_bert(tmp_path / "bert", max_position=96)
    assert folder == tmp_path / "bert"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file()

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.is_fast
    assert tokenizer.model_max_length == 96
    for text in SENTENCES:
        tokens = tokenizer.tokenize(text)
        assert "[UNK]" not in tokens, (text, tokens)
    ids = tokenizer("The BANK")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["[CLS]", "the", "bank", "[SEP]"]
    assert "token_type_ids" in tokenizer("x")

    states = _hidden_states(folder, SENTENCES)
    assert states.shape[0] == len(SENTENCES)
    assert states.shape[-1] == 32


def test_bert_minilm_width(tmp_path: Path) -> None:
    states = _hidden_states(build_bert(tmp_path, hidden=384, layers=1), SENTENCES[:2])
    assert states.shape[-1] == 384


def test_bert_seeds_and_determinism(tmp_path: Path) -> None:
    a = build_bert(tmp_path / "a", seed=0)
    b = build_bert(tmp_path / "b", seed=0)
    c = build_bert(tmp_path / "c", seed=1)
    weights = [(p / "model.safetensors").read_bytes() for p in (a, b, c)]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()
    assert not torch.allclose(_hidden_states(a, SENTENCES), _hidden_states(c, SENTENCES))


def test_builders_leave_global_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_bert(tmp_path, seed=5)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("pooling", POOLING_MODES)
def test_sentence_transformer_pooling_modes(tmp_path: Path, pooling: str) -> None:
    from sentence_transformers import SentenceTransformer

    folder = build_sentence_transformer(tmp_path, pooling=pooling)
    assert _read_json(folder / "1_Pooling" / "config.json")["pooling_mode"] == pooling
    model = SentenceTransformer(str(folder), device="cpu")
    emb = model.encode(SENTENCES, convert_to_tensor=True)
    assert emb.shape == (len(SENTENCES), 32)
    assert torch.allclose(emb.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)
    # Different sentences must not collapse onto one vector.
    assert not torch.allclose(emb[0], emb[1])


def test_sentence_transformer_dense_prompts_layout(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    prompts = {"query": "query: ", "document": "passage: "}
    folder = build_sentence_transformer(
        tmp_path,
        dense_out=16,
        dense_activation="identity",
        prompts=prompts,
        default_prompt_name="query",
        max_seq_length=40,
    )
    modules = _read_json(folder / "modules.json")
    assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Dense", "3_Normalize"]
    dense_cfg = _read_json(folder / "2_Dense" / "config.json")
    assert dense_cfg["activation_function"] == "torch.nn.modules.linear.Identity"
    assert (folder / "2_Dense" / "model.safetensors").is_file()
    st_cfg = _read_json(folder / "config_sentence_transformers.json")
    assert st_cfg["prompts"] == prompts
    assert st_cfg["default_prompt_name"] == "query"
    assert _read_json(folder / "tokenizer_config.json")["model_max_length"] == 40

    model = SentenceTransformer(str(folder), device="cpu")
    assert model.prompts == prompts
    assert model.default_prompt_name == "query"
    assert model.max_seq_length == 40
    query = model.encode(["what is a cat"], prompt_name="query", convert_to_tensor=True)
    doc = model.encode(["what is a cat"], prompt_name="document", convert_to_tensor=True)
    assert query.shape == (1, 16)
    assert not torch.allclose(query, doc)
    # The plain transformer inside is still an AutoModel folder.
    assert _hidden_states(folder, SENTENCES[:1]).shape[-1] == 32


def test_sentence_transformer_tanh_no_normalize(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    folder = build_sentence_transformer(tmp_path, dense_out=8, normalize=False, pooling="cls")
    assert [m["path"] for m in _read_json(folder / "modules.json")][-1] == "2_Dense"
    dense_cfg = _read_json(folder / "2_Dense" / "config.json")
    assert dense_cfg["activation_function"] == "torch.nn.modules.activation.Tanh"
    emb = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert emb.shape == (len(SENTENCES), 8)
    assert emb.abs().max() < 1.0  # tanh range; unnormalised


def test_sentence_transformer_legacy_layout_matches(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    kwargs = {"pooling": "weightedmean", "dense_out": 16, "max_seq_length": 48, "seed": 3}
    new = build_sentence_transformer(tmp_path / "new", **kwargs)
    old = build_sentence_transformer(tmp_path / "old", legacy=True, **kwargs)
    assert not (old / "3_Normalize").exists()
    assert _read_json(old / "sentence_bert_config.json") == {
        "max_seq_length": 48,
        "do_lower_case": False,
    }
    pooling_cfg = _read_json(old / "1_Pooling" / "config.json")
    assert pooling_cfg["pooling_mode_weightedmean_tokens"] is True
    assert pooling_cfg["pooling_mode_mean_tokens"] is False
    types = [m["type"] for m in _read_json(old / "modules.json")]
    assert types[0] == "sentence_transformers.models.Transformer"

    old_model = SentenceTransformer(str(old), device="cpu")
    assert old_model.max_seq_length == 48
    new_emb = SentenceTransformer(str(new), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    old_emb = old_model.encode(SENTENCES, convert_to_tensor=True)
    assert torch.allclose(new_emb, old_emb, atol=1e-6)


def test_sentence_transformer_seeds_and_determinism(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    a = build_sentence_transformer(tmp_path / "a", dense_out=16, seed=0)
    b = build_sentence_transformer(tmp_path / "b", dense_out=16, seed=0)
    c = build_sentence_transformer(tmp_path / "c", dense_out=16, seed=1)
    for rel in ("model.safetensors", "2_Dense/model.safetensors"):
        assert (a / rel).read_bytes() == (b / rel).read_bytes()
        assert (a / rel).read_bytes() != (c / rel).read_bytes()
    emb_a = SentenceTransformer(str(a), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    emb_c = SentenceTransformer(str(c), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert not torch.allclose(emb_a, emb_c)


def test_decoder_tokenizer_appends_eos_and_pads_right(tmp_path: Path) -> None:
    folder = build_decoder(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.is_fast
    assert tokenizer.padding_side == "right"
    assert tokenizer.eos_token == DECODER_SPECIAL_TOKENS["eos_token"]
    assert tokenizer.pad_token == DECODER_SPECIAL_TOKENS["pad_token"]
    assert tokenizer.pad_token_id != tokenizer.eos_token_id

    batch = tokenizer(["the bank", "we sat on the river bank ."], padding=True, return_tensors="pt")
    short_ids = batch["input_ids"][0].tolist()
    assert tokenizer.convert_ids_to_tokens(short_ids[:3]) == ["the", "bank", "</s>"]
    assert set(short_ids[3:]) == {tokenizer.pad_token_id}
    assert batch["attention_mask"][0].tolist() == [1, 1, 1] + [0] * (len(short_ids) - 3)
    assert batch["input_ids"][1, -1].item() == tokenizer.eos_token_id
    assert tokenizer.unk_token_id not in batch["input_ids"].tolist()[1]

    config = _read_json(folder / "config.json")
    assert config["eos_token_id"] == tokenizer.eos_token_id
    assert config["pad_token_id"] == tokenizer.pad_token_id


def test_decoder_loads_seeds_and_determinism(tmp_path: Path) -> None:
    a = build_decoder(tmp_path / "a", hidden=48, heads=3)
    b = build_decoder(tmp_path / "b", hidden=48, heads=3)
    c = build_decoder(tmp_path / "c", hidden=48, heads=3, seed=7)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    states_a = _hidden_states(a, SENTENCES)
    assert states_a.shape[-1] == 48
    assert not torch.allclose(states_a, _hidden_states(c, SENTENCES))


def test_dpr_pair(tmp_path: Path) -> None:
    query, document = build_dpr_pair(tmp_path, hidden=24)
    assert (query, document) == (tmp_path / "query", tmp_path / "document")
    assert (query / "tokenizer.json").read_bytes() == (document / "tokenizer.json").read_bytes()
    assert (query / "model.safetensors").read_bytes() != (
        document / "model.safetensors"
    ).read_bytes()
    q_states = _hidden_states(query, SENTENCES)
    d_states = _hidden_states(document, SENTENCES)
    assert q_states.shape == d_states.shape
    assert q_states.shape[-1] == 24
    assert not torch.allclose(q_states, d_states)


def test_invalid_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        build_bert(tmp_path / "x", hidden=30, heads=4)
    with pytest.raises(ValueError):
        build_sentence_transformer(tmp_path / "y", pooling="median")
    with pytest.raises(ValueError):
        build_sentence_transformer(tmp_path / "z", dense_out=4, dense_activation="swish")
