"""Tiny, seeded, randomly initialised model folders built in code, for tests.

Each builder writes a folder that loads exactly like a downloaded model
(``transformers.AutoModel`` / ``AutoTokenizer`` with a *fast* tokenizer and a
``tokenizer.json``; sentence-transformers folders also load with
``SentenceTransformer(path)``), fully offline and in a fraction of a second.

Findings: the folder sentence-transformers 6.2 writes
======================================================
Observed with sentence-transformers 6.2.0 / transformers 5.24.0, by saving
``SentenceTransformer(modules=[Transformer, Pooling, Dense, Normalize], prompts=...,
default_prompt_name=...).save(path)`` (``build_sentence_transformer``):

``modules.json`` (a list, in order; ``path`` is relative, ``""`` = folder root)::

    [{"idx": 0, "name": "0", "path": "",
      "type": "sentence_transformers.base.modules.transformer.Transformer"},
     {"idx": 1, "name": "1", "path": "1_Pooling",
      "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
     {"idx": 2, "name": "2", "path": "2_Dense",
      "type": "sentence_transformers.base.modules.dense.Dense"},
     {"idx": 3, "name": "3", "path": "3_Normalize",
      "type": "sentence_transformers.base.modules.normalize.Normalize"}]

Folder names are ``f"{idx}_{ClassName}"``, so without Dense the Normalize
folder is ``2_Normalize``. The Transformer module is always saved in the root.

Root (Transformer module): ``config.json`` + ``model.safetensors`` (plain
``BertModel`` keys without a ``bert.`` prefix, e.g.
``embeddings.word_embeddings.weight``, ``pooler.dense.weight``),
``tokenizer.json``, ``tokenizer_config.json`` (transformers 5 writes no
``vocab.txt`` / ``special_tokens_map.json``) and ``sentence_bert_config.json``::

    {"transformer_task": "feature-extraction",
     "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
     "module_output_name": "token_embeddings"}

* ``max_seq_length`` is NOT in ``sentence_bert_config.json`` any more (nor is
  ``do_lower_case``): ST 6 stores it as ``"model_max_length"`` in the root
  ``tokenizer_config.json`` (``SentenceTransformer.max_seq_length`` reads the
  tokenizer's ``model_max_length``). Older folders keep
  ``{"max_seq_length": 256, "do_lower_case": false}`` in
  ``sentence_bert_config.json`` while their ``tokenizer_config.json`` may say
  something larger (all-MiniLM-L6-v2: 256 vs 512); the ``sentence_bert_config``
  value wins when present.
* ``tokenizer_config.json`` also picks up loader noise such as
  ``"is_local": true, "local_files_only": true``.

``config_sentence_transformers.json``::

    {"__version__": {"pytorch": ..., "sentence_transformers": "6.2.0", "transformers": ...},
     "default_prompt_name": "query",            # null when not set
     "model_type": "SentenceTransformer",
     "prompts": {"document": "passage: ", "query": "query: "},
     "similarity_fn_name": "cosine"}

With no prompts given, 6.2 still writes ``"prompts": {"query": "", "document": ""}``
(empty strings: treat as "no prompt"). Old folders may lack the file's
``prompts`` / ``default_prompt_name`` / ``similarity_fn_name`` keys entirely
(all-MiniLM-L6-v2 has only ``__version__``).

``1_Pooling/config.json`` (only file in that folder; no weights)::

    {"embedding_dimension": 32, "pooling_mode": "mean", "include_prompt": true}

``pooling_mode`` is a single string, one of ``"cls" "max" "mean"
"mean_sqrt_len_tokens" "weightedmean" "lasttoken"`` (a JSON list such as
``["cls", "mean"]`` when several modes are concatenated, in list order). The legacy form
(still loaded by 6.2) is ``"word_embedding_dimension"`` plus booleans ``pooling_mode_cls_token``,
``pooling_mode_max_tokens``, ``pooling_mode_mean_tokens``,
``pooling_mode_mean_sqrt_len_tokens``, ``pooling_mode_weightedmean_tokens``,
``pooling_mode_lasttoken`` (all false means mean).

``2_Dense/config.json`` + ``2_Dense/model.safetensors`` (tensors
``linear.weight`` shaped ``[out_features, in_features]`` and ``linear.bias``;
no safetensors metadata)::

    {"in_features": 32, "out_features": 16, "bias": true,
     "activation_function": "torch.nn.modules.activation.Tanh",
     "module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"}

(``dense_activation="identity"`` saves ``"torch.nn.modules.linear.Identity"``;
``use_residual`` is written only when true.) Older ST versions (2.x) saved
Dense weights as ``pytorch_model.bin`` (same keys) and wrote only the first
four config keys.

``3_Normalize/config.json`` IS written by 6.2::

    {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"}

Older folders (e.g. all-MiniLM-L6-v2) list ``2_Normalize`` in ``modules.json``
but ship no such folder at all; a reader must not require it.

``README.md`` (model card) is written by default; the builders here pass
``create_model_card=False``.

Legacy format (``legacy=True`` in ``build_sentence_transformer``), as in
all-MiniLM-L6-v2 and other pre-v5 uploads: ``modules.json`` types are
``sentence_transformers.models.Transformer`` / ``.Pooling`` / ``.Dense`` /
``.Normalize``; ``sentence_bert_config.json`` is
``{"max_seq_length": N, "do_lower_case": false}``; pooling uses the boolean keys
above; the Normalize folder is absent.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    BertTokenizerFast,
    LlamaConfig,
    LlamaModel,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForSequenceClassification,
    RobertaModel,
)

__all__ = [
    "DECODER_SPECIAL_TOKENS",
    "POOLING_MODES",
    "VOCAB",
    "build_bert",
    "build_cross_encoder",
    "build_decoder",
    "build_dpr_pair",
    "build_minilm_cross_encoder",
    "build_sentence_transformer",
]

_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

_WORDS = """
the a an and or but not no yes if then than so because as of to in on at by for with from
about into onto over under up down out off after before between through during without within
is are was were be been being am do does did done have has had having can could will would
should may might must shall it its this that these those there here what which who whom whose
where when why how all any some many much more most other another such only also very just
too again still even ever never always often well i me my we us our you your he him his she
her they them their one two three four five six seven eight nine ten hundred thousand million
first second last next new old good bad big small great high low long short same different
right left best better own few each every both
year years day days week month time times today tomorrow yesterday morning night people person
man men woman women child children family friend friends world life home house room door
city town country road street place part way thing things name fact case point number group
bank banks river rivers money interest rate rates raised raise raises loan loans credit
deposit account finance financial market markets stock price prices economy central federal
reserve inflation dollar dollars cash pay paid tax invest investment fund funds profit cost
water sat sit sits sitting fish fishing boat boats shore grass tree trees flower flowers walk
walked swim flow flows stream lake sea ocean mountain park hill field rain sun weather cold hot
warm wind snow sky
cat cats dog dogs animal animals bird birds pet pets horse food eat eats ate drink milk coffee
tea apple apples fruit bread car cars bus train school book books music game games
query queries passage passages represent representation sentence sentences searching search
relevant retrieve retrieval retrieving document documents text texts question questions answer
answers instruct instruction given web find embed embedding embeddings model models language
word words computer data science learning machine python code program information system
topic title summary example examples test tests similar similarity meaning
use used using make made get got go goes went come came see saw know known think say said
take took give gave like want need look tell ask feel try leave call read write written run
runs play move live lives believe hold bring happen keep let begin seem help show hear turn
start open close buy sell sold bought lend borrow work works worked
red blue green black white paris france london capital king queen
item items growth percent total report news company business government state law war power
health hospital doctor body hand head eye face heart mind idea story history art film movie
phone email internet online site page user users service services product products team
"""

# Sub-word continuations: common suffixes plus every letter and digit, so any
# ASCII word falls back to pieces instead of [UNK] (as in the real BERT vocab).
_SUFFIXES = """
##s ##es ##ed ##d ##ing ##ly ##er ##ers ##est ##ion ##ions ##tion ##al ##ment ##ness ##ful
##less ##able ##y ##ies ##en ##ity ##ive ##ic ##ize ##ise ##ist ##ism ##ous
"""

_CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789")
_PUNCT = list(".,!?;:'\"()[]{}-_/\\&%$#@*+=<>|~`^")

#: BERT word-piece vocabulary: specials first (ids 0-4), then punctuation,
#: single characters, whole words, suffixes and ``##`` character pieces.
VOCAB: list[str] = list(
    dict.fromkeys(
        _SPECIALS
        + _PUNCT
        + _CHARS
        + _WORDS.split()
        + _SUFFIXES.split()
        + [f"##{c}" for c in _CHARS]
    )
)

#: Special tokens of the decoder vocabulary (ids 0-3), Llama style.
DECODER_SPECIAL_TOKENS: dict[str, str] = {
    "unk_token": "<unk>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
}

#: Pooling modes sentence-transformers 6.2 accepts (``Pooling.POOLING_MODES``).
POOLING_MODES: tuple[str, ...] = (
    "cls",
    "max",
    "mean",
    "mean_sqrt_len_tokens",
    "weightedmean",
    "lasttoken",
)

# Legacy ``pooling_mode_*`` boolean key for each mode (pre-v5 1_Pooling/config.json).
_LEGACY_POOLING_KEYS: dict[str, str] = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def _check_heads(hidden: int, heads: int) -> None:
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be divisible by heads={heads}")


def _write_bert_tokenizer(path: Path, *, max_length: int) -> None:
    """Write vocab.txt, tokenizer.json and tokenizer_config.json for VOCAB.

    Going through transformers' own BERT tokenizer class (built from vocab.txt)
    gives the real pipeline: BertNormalizer (lowercase), BertPreTokenizer,
    WordPiece, the ``[CLS] $A [SEP]`` template and token_type_ids.
    """
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("".join(f"{tok}\n" for tok in VOCAB), encoding="utf-8")
    tokenizer = BertTokenizerFast(str(vocab_file), do_lower_case=True, model_max_length=max_length)
    tokenizer.save_pretrained(str(path))


def build_bert(
    path: str | Path,
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    intermediate: int | None = None,
    max_position: int = 128,
    seed: int = 0,
) -> Path:
    """Write a random ``BertModel`` folder with a fast WordPiece tokenizer over VOCAB."""
    _check_heads(hidden, heads)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate if intermediate is not None else 4 * hidden,
        max_position_embeddings=max_position,
        pad_token_id=0,
    )
    return _save_random_encoder(BertModel, config, path, seed=seed, max_length=max_position)


def _save_random_encoder(
    model_class: type, config: Any, path: Path, *, seed: int, max_length: int
) -> Path:
    # fork_rng: seed the init without disturbing the caller's global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.save_pretrained(str(path))
    _write_bert_tokenizer(path, max_length=max_length)
    return path


def build_roberta(path: str | Path, *, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a random ``RobertaModel`` folder over VOCAB's WordPiece tokenizer.

    The architecture is what matters here (its position ids count from the padding id, and it has
    one token type); the tokenizer only supplies ids, so the BERT one over VOCAB serves.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = RobertaConfig(
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=4 * hidden,
        max_position_embeddings=130,  # 128 tokens after the padding id's offset of 2
        pad_token_id=0,
        type_vocab_size=1,
    )
    return _save_random_encoder(RobertaModel, config, path, seed=seed, max_length=128)


def _activation(name: str | None) -> torch.nn.Module:
    # Only torch.nn classes: ST refuses other activation paths without trust_remote_code.
    table: dict[str, type[torch.nn.Module]] = {
        "tanh": torch.nn.Tanh,
        "identity": torch.nn.Identity,
        "relu": torch.nn.ReLU,
        "gelu": torch.nn.GELU,
    }
    key = "identity" if name is None else name.lower()
    if key not in table:
        raise ValueError(f"dense_activation must be one of {sorted(table)} or None, got {name!r}")
    return table[key]()


def _read_json(file: Path) -> Any:
    return json.loads(file.read_text(encoding="utf-8"))


def _write_json(file: Path, data: Any) -> None:
    file.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _rewrite_legacy(path: Path, *, max_seq_length: int, max_position: int) -> None:
    """Rewrite a freshly saved ST 6.2 folder into the pre-v5 layout (all-MiniLM-L6-v2 style)."""
    modules = _read_json(path / "modules.json")
    for entry in modules:
        class_name = entry["type"].rsplit(".", 1)[-1]
        entry["type"] = f"sentence_transformers.models.{class_name}"
        folder = path / entry["path"]
        if class_name == "Pooling":
            cfg = _read_json(folder / "config.json")
            legacy = {"word_embedding_dimension": cfg["embedding_dimension"]}
            legacy.update(
                {key: cfg["pooling_mode"] == m for m, key in _LEGACY_POOLING_KEYS.items()}
            )
            legacy["include_prompt"] = cfg.get("include_prompt", True)
            _write_json(folder / "config.json", legacy)
        elif class_name == "Dense":
            cfg = _read_json(folder / "config.json")
            keep = ("in_features", "out_features", "bias", "activation_function")
            _write_json(folder / "config.json", {k: cfg[k] for k in keep})
        elif class_name == "Normalize":
            # Old uploads list the Normalize module but ship no folder for it.
            shutil.rmtree(folder)
    _write_json(path / "modules.json", modules)
    _write_json(
        path / "sentence_bert_config.json",
        {"max_seq_length": max_seq_length, "do_lower_case": False},
    )
    # Old folders keep the tokenizer's own (larger) limit; the ST value lives above.
    tok_cfg = _read_json(path / "tokenizer_config.json")
    tok_cfg["model_max_length"] = max_position
    for noise in ("is_local", "local_files_only"):
        tok_cfg.pop(noise, None)
    _write_json(path / "tokenizer_config.json", tok_cfg)


def build_sentence_transformer(
    path: str | Path,
    *,
    pooling: str = "mean",
    normalize: bool = True,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    dense_out: int | None = None,
    dense_activation: str | None = "tanh",
    max_seq_length: int = 64,
    hidden: int = 32,
    seed: int = 0,
    legacy: bool = False,
) -> Path:
    """Write a sentence-transformers folder: Transformer → Pooling → [Dense] → [Normalize].

    Composed from sentence-transformers' own modules and saved with
    ``SentenceTransformer.save``; see the module docstring for the resulting
    files. ``legacy=True`` rewrites the configs into the pre-v5 layout.
    """
    # Imported here: sentence-transformers is an optional extra of ctxemb.
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Normalize,
        Pooling,
        Transformer,
    )

    if pooling not in POOLING_MODES:
        raise ValueError(f"pooling must be one of {POOLING_MODES}, got {pooling!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    max_position = max(128, max_seq_length)

    modules: list[torch.nn.Module] = []
    with tempfile.TemporaryDirectory(prefix="tiny_bert_") as tmp:
        build_bert(tmp, hidden=hidden, max_position=max_position, seed=seed)
        modules.append(Transformer(tmp, max_seq_length=max_seq_length))
        # Positional: the keyword was renamed (word_embedding_dimension → embedding_dimension).
        modules.append(Pooling(hidden, pooling_mode=pooling))
        if dense_out is not None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                modules.append(
                    Dense(hidden, dense_out, activation_function=_activation(dense_activation))
                )
        if normalize:
            modules.append(Normalize())
        model = SentenceTransformer(
            modules=modules,
            device="cpu",
            prompts=prompts,
            default_prompt_name=default_prompt_name,
        )
        model.save(str(path), create_model_card=False)
    if legacy:
        _rewrite_legacy(path, max_seq_length=max_seq_length, max_position=max_position)
    return path


def _decoder_vocab() -> list[str]:
    # WordLevel has no sub-words, so the "##" pieces would never match.
    words = [tok for tok in VOCAB[len(_SPECIALS) :] if not tok.startswith("##")]
    return list(dict.fromkeys([*DECODER_SPECIAL_TOKENS.values(), *words]))


def build_decoder(
    path: str | Path,
    *,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 2,
    max_position: int = 128,
    seed: int = 0,
) -> Path:
    """Write a random decoder-only ``LlamaModel`` folder with a WordLevel fast tokenizer.

    The tokenizer lowercases, splits on whitespace/punctuation, appends ``</s>``
    (EOS) to every sequence via its post-processor (like e5-mistral / Qwen3
    embedders, so last-token pooling lands on EOS), pads with ``<pad>`` on the
    right, and adds no BOS.
    """
    _check_heads(hidden, heads)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = _decoder_vocab()
    ids = {tok: i for i, tok in enumerate(vocab)}
    sp = DECODER_SPECIAL_TOKENS

    backend = Tokenizer(models.WordLevel(ids, unk_token=sp["unk_token"]))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    eos = sp["eos_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A:0 {eos}:0",
        pair=f"$A:0 {eos}:0 $B:1 {eos}:1",
        special_tokens=[(eos, ids[eos])],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        padding_side="right",
        model_max_length=max_position,
        **sp,
    )
    tokenizer.save_pretrained(str(path))

    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_position,
        pad_token_id=ids[sp["pad_token"]],
        bos_token_id=ids[sp["bos_token"]],
        eos_token_id=ids[eos],
        tie_word_embeddings=False,
        use_cache=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaModel(config)
    model.save_pretrained(str(path))
    return path


def build_dpr_pair(path: str | Path, *, hidden: int = 32, seed: int = 0) -> tuple[Path, Path]:
    """Write two BERT folders (``path/"query"``, ``path/"document"``) with one shared vocab.

    The encoders differ only in weights (seeds ``seed`` and ``seed + 1``), like
    an asymmetric dual encoder.
    """
    path = Path(path)
    query = build_bert(path / "query", hidden=hidden, seed=seed)
    document = build_bert(path / "document", hidden=hidden, seed=seed + 1)
    return query, document


#: Activations a sentence-transformers CrossEncoder folder may be saved with, by name.
CROSS_ENCODER_ACTIVATIONS: dict[str, type[torch.nn.Module]] = {
    "sigmoid": torch.nn.Sigmoid,
    "identity": torch.nn.Identity,
    "softmax": torch.nn.Softmax,
}


def _write_roberta_style_tokenizer(path: Path, *, max_length: int) -> None:
    """VOCAB's WordPiece tokenizer with RoBERTa's pair template and inputs.

    ``[CLS] a [SEP] [SEP] b [SEP]`` (RoBERTa's ``<s> a </s></s> b </s>``), one segment, and no
    ``token_type_ids`` among the model inputs, as a RoBERTa tokenizer gives (its network has one
    token type, so a second segment would index past its table).
    """
    bert = BertTokenizerFast(str(_vocab_file(path)), do_lower_case=True)
    backend = bert.backend_tokenizer
    ids = {tok: i for i, tok in enumerate(VOCAB)}
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] [SEP] $B [SEP]",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=max_length,
        model_input_names=["input_ids", "attention_mask"],
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
    )
    tokenizer.save_pretrained(str(path))
    (path / "vocab.txt").unlink()


def _vocab_file(path: Path) -> Path:
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("".join(f"{tok}\n" for tok in VOCAB), encoding="utf-8")
    return vocab_file


def build_cross_encoder(
    path: str | Path,
    *,
    architecture: str = "bert",
    num_labels: int = 1,
    hidden: int = 32,
    layers: int = 2,
    seed: int = 0,
    sentence_transformers: bool = False,
    activation: str | None = None,
) -> Path:
    """Write a random sequence-classification folder (a tiny cross-encoder) over VOCAB.

    ``architecture`` is ``"bert"`` (BERT's pair encoding with segment ids) or ``"roberta"`` (one
    segment, RoBERTa's pair template). The folder is a plain transformers one, or, with
    ``sentence_transformers=True``, what ``CrossEncoder(folder).save_pretrained`` writes
    (``config_sentence_transformers.json`` with the activation, ``modules.json``,
    ``sentence_bert_config.json``); ``activation`` (a key of
    :data:`CROSS_ENCODER_ACTIVATIONS`) is passed to the CrossEncoder, which otherwise saves its
    default (sigmoid for one label, identity for several).
    """
    if architecture not in ("bert", "roberta"):
        raise ValueError(f"architecture must be 'bert' or 'roberta', got {architecture!r}")
    path = Path(path)
    if sentence_transformers:
        from sentence_transformers import CrossEncoder

        with tempfile.TemporaryDirectory(prefix="tiny_ce_") as tmp:
            build_cross_encoder(
                tmp,
                architecture=architecture,
                num_labels=num_labels,
                hidden=hidden,
                layers=layers,
                seed=seed,
            )
            fn = None if activation is None else CROSS_ENCODER_ACTIVATIONS[activation]()
            CrossEncoder(tmp, device="cpu", activation_fn=fn).save_pretrained(
                str(path), create_model_card=False
            )
        return path
    if activation is not None:
        raise ValueError("a plain transformers folder saves no activation")
    path.mkdir(parents=True, exist_ok=True)
    common = {
        "vocab_size": len(VOCAB),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "intermediate_size": 4 * hidden,
        "pad_token_id": 0,
        "num_labels": num_labels,
    }
    model_class: type
    if architecture == "bert":
        config: Any = BertConfig(max_position_embeddings=128, **common)
        model_class = BertForSequenceClassification
    else:
        # 128 tokens after the padding id's offset of 2; one token type.
        config = RobertaConfig(max_position_embeddings=130, type_vocab_size=1, **common)
        model_class = RobertaForSequenceClassification
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.save_pretrained(str(path))
    if architecture == "bert":
        _write_bert_tokenizer(path, max_length=128)
    else:
        _write_roberta_style_tokenizer(path, max_length=128)
    return path


def build_minilm_cross_encoder(
    path: str | Path, minilm: str | Path, *, num_labels: int = 1, seed: int = 0
) -> Path:
    """A cross-encoder of real size: the MiniLM encoder with an untrained, seeded head.

    ``AutoModelForSequenceClassification.from_pretrained(minilm, num_labels=...)`` (the head is
    the only random part) saved with MiniLM's tokenizer: a plain transformers folder.
    """
    path = Path(path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(minilm), num_labels=num_labels
        )
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(str(minilm)).save_pretrained(str(path))
    return path
