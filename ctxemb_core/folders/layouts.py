"""Reading a network's folder: sentence-transformers (embedder or CrossEncoder) and plain
transformers layouts, into one :class:`ModelLayout` (no weights are loaded).

The folder is untrusted input: every file read is checked for shape and types, module paths
must stay inside the folder, and nothing in it is imported or unpickled.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core.contract import Pooling
from ctxemb_core.errors import (
    InvalidInputError,
    MalformedModelError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from ctxemb_core.folders._read import (
    MAX_CONFIG_JSON,
    first_positive_int,
    positive_int,
    present,
    read_object,
    safetensors_files,
)
from ctxemb_core.folders.st_modules import (
    DENSE_ACTIVATIONS,
    TASKS,
    DenseSpec,
    check_dense_activation,
    read_modules,
    read_st_config,
    read_st_transformer,
)

__all__ = [
    "DENSE_ACTIVATIONS",
    "MAX_CONFIG_JSON",
    "TASKS",
    "DenseSpec",
    "ModelLayout",
    "check_dense_activation",
    "classification_architecture",
    "read_layout",
]


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
    #: What the network computes (a key of :data:`TASKS`).
    task: str = "feature-extraction"
    #: Sequence-classification only: the labels of the network's head, the score activation
    #: sentence-transformers' CrossEncoder saved (an import path such as
    #: ``"torch.nn.modules.activation.Sigmoid"``, or ``None``), and whether that CrossEncoder
    #: saved the folder (its documented default activation applies then).
    num_labels: int | None = None
    saved_activation: str | None = None
    cross_encoder: bool = False
    #: The network's number of hidden layers (``num_hidden_layers``), where its config says.
    num_layers: int | None = None
    #: Whether the folder's Pooling module pools the prompt's tokens (``include_prompt``).
    include_prompt: bool = True

    @property
    def dimension(self) -> int:
        return self.dense[-1].out_features if self.dense else self.hidden_size


# transformers' "no limit" model_max_length is int(1e30); anything this large says "none".
_NO_LIMIT = 1_000_000


def _refuse_custom_code(data: dict[str, Any], where: Path) -> None:
    # transformers runs the folder's own Python for an auto_map class it does not know (after a
    # "[y/N]" prompt on a terminal), and silently loads its own class for one it knows, which is
    # not the network the author meant. ctxemb can reproduce neither, so it refuses both.
    if "auto_map" in data:
        raise UnsupportedModelError(
            f"{where} maps its classes to Python code shipped with the model (auto_map "
            f"{data['auto_map']!r}); ctxemb never runs code from a model folder and cannot "
            "reproduce a custom architecture, so the folder is refused"
        )


def read_layout(folder: str | os.PathLike[str], *, task: str = "feature-extraction") -> ModelLayout:
    """Read a sentence-transformers or plain transformers folder (no weights are loaded).

    The folder is untrusted input: every file read is checked for shape and types, module paths
    must stay inside the folder, and nothing in it is imported or unpickled.

    Args:
        folder: the model folder.
        task: ``"feature-extraction"`` (an embedder: a SentenceTransformer folder or a plain
            transformers one) or ``"sequence-classification"`` (a cross-encoder: a
            sentence-transformers CrossEncoder folder or a plain ``*ForSequenceClassification``
            one; its labels and saved activation are read too).

    Raises:
        ModelNotFoundError: no such folder, or one without a config or weights.
        MalformedModelError: a file is not what its format says (it is both a
            :class:`~ctxemb_core.errors.DataFormatError` and an ``UnsupportedModelError``).
        PickledWeightsError: the weights are only a pickle (``pytorch_model.bin``).
        UnsupportedModelError: a module graph or architecture ctxemb cannot reproduce.
    """
    if task not in TASKS:
        raise InvalidInputError(f"task={task!r} is not known; valid tasks are {sorted(TASKS)}")
    root = Path(folder).resolve()
    if not root.is_dir():
        raise ModelNotFoundError(f"model folder {str(folder)!r} does not exist")
    transformer, pooling, normalize = root, None, None
    include_prompt = True
    dense: tuple[DenseSpec, ...] = ()
    is_st = present(root / "modules.json")
    if is_st:
        transformer, pooling, dense, normalize, include_prompt = read_modules(root)
        if task != "feature-extraction" and (pooling or dense or normalize):
            raise UnsupportedModelError(
                f"{root.name} pools, projects or normalises token vectors: an embedder, not a "
                "cross-encoder (whose folder runs the Transformer module alone)"
            )
    config_file = transformer / "config.json"
    if not present(config_file):
        raise ModelNotFoundError(f"{transformer} has no config.json: not a model folder")
    safetensors_files(transformer)
    config = read_object(config_file)
    _refuse_custom_code(config, config_file)
    hidden = first_positive_int(config, config_file, "hidden_size", "d_model", "n_embd", "dim")
    if hidden is None:
        raise UnsupportedModelError(f"{config_file} names no hidden size")
    # Counts transformers divides by or builds layers from: 0 or -1 would fail deep inside it
    # (ZeroDivisionError) or build a network without the layers the weights hold.
    for key in ("num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size"):
        positive_int(config, key, config_file)
    num_layers = first_positive_int(config, config_file, "num_hidden_layers", "n_layer")
    width = hidden
    for spec in dense:
        if spec.in_features != width:
            raise MalformedModelError(
                f"{spec.path}: the Dense head takes {spec.in_features} features but is given "
                f"{width}; the folder's modules do not fit together"
            )
        width = spec.out_features
    prompts: dict[str, str] = {}
    default_prompt = None
    st_config: dict[str, Any] = {}
    if present(root / "config_sentence_transformers.json"):
        st_config = read_object(root / "config_sentence_transformers.json")
        prompts, default_prompt = read_st_config(
            root / "config_sentence_transformers.json", st_config, task
        )
    max_seq = None
    for name in ("sentence_bert_config.json", "sentence_xlm-roberta_config.json"):
        if present(transformer / name):
            max_seq = read_st_transformer(transformer / name, task)
            break
    positions = first_positive_int(
        config, config_file, "max_position_embeddings", "n_positions", "n_ctx"
    )
    if present(transformer / "tokenizer_config.json"):
        limit = _read_tokenizer_limit(transformer / "tokenizer_config.json")
        if limit is not None:
            positions = min(positions, limit) if positions else limit
    layout = ModelLayout(
        root=root,
        transformer=transformer,
        is_sentence_transformers=is_st,
        pooling=pooling,
        normalize=normalize,
        dense=dense,
        prompts=prompts,
        default_prompt_name=default_prompt,
        max_seq_length=max_seq,
        max_positions=positions,
        hidden_size=hidden,
        num_layers=num_layers,
        include_prompt=include_prompt,
    )
    if task == "feature-extraction":
        return layout
    return _classifier_layout(layout, config, config_file, st_config)


def _classifier_layout(
    layout: ModelLayout, config: dict[str, Any], where: Path, st_config: dict[str, Any]
) -> ModelLayout:
    """``layout`` with the head of a sequence-classification network: labels, saved activation."""
    if _classification_architecture(config, where) is None:
        raise UnsupportedModelError(
            f"{where}: architectures {config.get('architectures')!r} name no "
            "*ForSequenceClassification network, so the folder is not a cross-encoder"
        )
    labels = config.get("id2label")
    if labels is not None:
        if not isinstance(labels, dict) or not labels:
            raise MalformedModelError(f"{where}: id2label must be a non-empty object")
        num_labels = len(labels)
    else:
        # transformers' own default when a config says neither.
        num_labels = positive_int(config, "num_labels", where) or 2
    # Where sentence-transformers saved the activation, newest first, as CrossEncoder reads it.
    nested = config.get("sentence_transformers")
    if nested is not None and not isinstance(nested, dict):
        raise MalformedModelError(f"{where}: sentence_transformers must be an object")
    activation = None
    for source, data, key in (
        ("config_sentence_transformers.json", st_config, "activation_fn"),
        (f"{where.name} sentence_transformers", nested or {}, "activation_fn"),
        (where.name, config, "sbert_ce_default_activation_function"),
    ):
        activation = data.get(key)
        if activation is not None:
            if not isinstance(activation, str):
                raise MalformedModelError(
                    f"{layout.root.name}: {source} {key} must be an import path, got {activation!r}"
                )
            break
    saved_by_st = (
        layout.is_sentence_transformers
        or bool(st_config)
        or nested is not None
        or "sbert_ce_default_activation_function" in config
    )
    return dataclasses.replace(
        layout,
        task="sequence-classification",
        num_labels=num_labels,
        saved_activation=activation,
        cross_encoder=saved_by_st,
    )


def classification_architecture(folder: str | os.PathLike[str]) -> str | None:
    """The ``*ForSequenceClassification`` architecture a folder's ``config.json`` names, if any.

    What tells a cross-encoder folder from an embedder's, as sentence-transformers' CrossEncoder
    reads it (the first architecture listed); ``None`` for a folder without a config.
    """
    config_file = Path(folder) / "config.json"
    if not present(config_file):
        return None
    return _classification_architecture(read_object(config_file), config_file)


def _classification_architecture(config: dict[str, Any], where: Path) -> str | None:
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures:
        return None
    first = architectures[0]
    if not isinstance(first, str):
        raise MalformedModelError(f"{where}: architectures must be a list of class names")
    return first if first.endswith("ForSequenceClassification") else None


def _read_tokenizer_limit(path: Path) -> int | None:
    """``model_max_length`` of ``tokenizer_config.json``, ``None`` where it sets no limit."""
    config = read_object(path)
    _refuse_custom_code(config, path)
    value = config.get("model_max_length")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= _NO_LIMIT:
        return None
    return positive_int(config, "model_max_length", path)
