"""A sentence-transformers folder's module graph: ``modules.json`` and the Transformer, Pooling,
Dense and Normalize modules it lists, with ``config_sentence_transformers.json`` (saved prompts).

ctxemb reproduces sentence-transformers' own modules exactly and refuses any other: a module
class from another package, a graph in another order, a Dense head whose weights do not have
the shapes its config promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core.contract import Pooling
from ctxemb_core.errors import (
    MalformedModelError,
    MissingDependencyError,
    ModelNotFoundError,
    UnsupportedModelError,
)
from ctxemb_core.folders._read import (
    positive_int,
    read_json,
    read_object,
    safetensors_files,
)

__all__ = [
    "DENSE_ACTIVATIONS",
    "TASKS",
    "DenseSpec",
    "check_dense_activation",
    "read_modules",
    "read_st_config",
    "read_st_transformer",
]

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


@dataclass(frozen=True)
class DenseSpec:
    """A sentence-transformers Dense module: its folder and shape."""

    path: Path
    in_features: int
    out_features: int
    activation: str


# The module graph ctxemb reproduces, in this order: a Transformer, then Pooling, any Dense
# heads and a Normalize. A module's place in that order is its rank.
_MODULE_RANK = {"Transformer": 0, "Pooling": 1, "Dense": 2, "Normalize": 3}
_MODULE_ORDER = "Transformer, Pooling, Dense (any number), Normalize"
#: The networks read_layout reads, each with the output ctxemb takes from it: token vectors for
#: an embedder, one logit per label for a cross-encoder.
TASKS = {"feature-extraction": "last_hidden_state", "sequence-classification": "logits"}
# What sentence-transformers calls a folder of each task (config_sentence_transformers.json).
_ST_MODEL_TYPES = {
    "feature-extraction": "SentenceTransformer",
    "sequence-classification": "CrossEncoder",
}

#: The ``torch.nn`` activation classes a Dense head may name (by their last part), each of
#: which :mod:`ctxemb_core.pooling` computes in numpy.
DENSE_ACTIVATIONS = ("GELU", "Identity", "ReLU", "Sigmoid", "Tanh")


def check_dense_activation(activation: Any, where: str) -> str:
    """The class name of a Dense config's ``activation_function`` (a ``torch.nn`` class path).

    Raises:
        MalformedModelError: the value is not a string.
        UnsupportedModelError: it names a class ctxemb does not implement, or one outside
            ``torch`` (sentence-transformers would import the folder's own code for it, or fall
            back to Tanh without saying so).
    """
    if not isinstance(activation, str):
        raise MalformedModelError(
            f"{where}: activation_function must be a torch.nn class path, got {activation!r}"
        )
    name = activation.rsplit(".", 1)[-1]
    if not activation.startswith("torch.") or name not in DENSE_ACTIVATIONS:
        raise UnsupportedModelError(
            f"{where}: dense activation {activation!r} is not supported; valid ones are the "
            f"torch.nn classes {sorted(DENSE_ACTIVATIONS)}"
        )
    return name


def _inside(root: Path, relative: Any, where: str) -> Path:
    """The resolved folder ``root / relative``, refused unless it stays inside ``root``."""
    if not isinstance(relative, str):
        raise MalformedModelError(f"{where}: path must be a string, got {relative!r}")
    if Path(relative).is_absolute():
        raise MalformedModelError(
            f"{where}: path {relative!r} is absolute; module paths are relative to the folder"
        )
    # resolve() follows symlinks too: a module folder linked elsewhere leaves the root.
    try:
        resolved = (root / relative).resolve()
    except (OSError, ValueError) as exc:  # a NUL byte, a link loop
        raise MalformedModelError(f"{where}: path {relative!r} cannot be used: {exc}") from None
    if not resolved.is_relative_to(root):
        raise MalformedModelError(
            f"{where}: path {relative!r} leads to {resolved}, outside the model folder {root}; "
            "ctxemb reads nothing outside the folder it is given"
        )
    return resolved


def read_modules(
    root: Path,
) -> tuple[Path, Pooling | None, tuple[DenseSpec, ...], bool, bool]:
    """The Transformer folder, pooling, Dense heads, normalisation and whether the pooling
    includes the prompt's tokens, of ``modules.json``."""
    modules_file = root / "modules.json"
    modules = read_json(modules_file)
    if not isinstance(modules, list):
        raise MalformedModelError(f"{modules_file} must hold a list of modules")
    transformer: Path | None = None
    pooling: Pooling | None = None
    dense: list[DenseSpec] = []
    normalize = False
    include_prompt = True
    kinds: list[str] = []
    # List order, as sentence-transformers runs them (it never sorts by "idx").
    for pos, module in enumerate(modules):
        where = f"{modules_file} entry {pos}"
        if not isinstance(module, dict):
            raise MalformedModelError(f"{where} must be an object, got {module!r}")
        kind = _module_kind(module.get("type"), where, root)
        path = _inside(root, module.get("path"), where)
        kinds.append(kind)
        if kind == "Transformer":
            transformer = path
        elif kind == "Pooling":
            pooling, include_prompt = _read_st_pooling(path / "config.json")
        elif kind == "Dense":
            dense.append(_read_st_dense(path))
        else:
            normalize = True
    ranks = [_MODULE_RANK[k] for k in kinds]
    repeated = [k for k in ("Transformer", "Pooling", "Normalize") if kinds.count(k) > 1]
    headless = bool({"Dense", "Normalize"} & set(kinds)) and "Pooling" not in kinds
    if transformer is None or ranks != sorted(ranks) or repeated or headless:
        raise UnsupportedModelError(
            f"{modules_file}: modules {kinds} are not a graph ctxemb reproduces exactly; it "
            f"runs {_MODULE_ORDER}, in that order, each at most once but Dense"
        )
    return transformer, pooling, tuple(dense), normalize, include_prompt


def _module_kind(type_name: Any, where: str, root: Path) -> str:
    if not isinstance(type_name, str):
        raise MalformedModelError(f"{where}: type must be a string, got {type_name!r}")
    kind = type_name.rsplit(".", 1)[-1]
    # A class named like ours from another package is the folder's own code: sentence-
    # transformers would import and run it, ctxemb would run its own. Neither is exact.
    if not type_name.startswith("sentence_transformers.") or kind not in _MODULE_RANK:
        raise UnsupportedModelError(
            f"{root.name}: module {type_name!r} is not supported; ctxemb reproduces "
            "sentence-transformers' own Transformer, Pooling, Dense and Normalize modules "
            "exactly and refuses anything it cannot reproduce"
        )
    return kind


def read_st_config(
    path: Path, data: dict[str, Any], task: str
) -> tuple[dict[str, str], str | None]:
    """The saved prompts and default prompt name of ``config_sentence_transformers.json``."""
    expected = _ST_MODEL_TYPES[task]
    model_type = data.get("model_type", expected)
    if model_type != expected:
        what = "a dense text embedder" if task == "feature-extraction" else "a cross-encoder"
        hint = (
            " (a cross-encoder's contract comes from ctxemb_core.rerank.rerank_contract_for)"
            if model_type == "CrossEncoder"
            else ""
        )
        raise UnsupportedModelError(
            f"{path}: a {model_type!r} folder is not {what}; ctxemb reads {expected} folders "
            f"for this{hint}"
        )
    prompts = data.get("prompts")
    if prompts is None:
        prompts = {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise MalformedModelError(
            f"{path}: prompts must be an object of prompt names to strings, got {prompts!r}"
        )
    default = data.get("default_prompt_name")
    if default is not None and (not isinstance(default, str) or default not in prompts):
        raise MalformedModelError(
            f"{path}: default_prompt_name {default!r} is not one of its prompts {sorted(prompts)}"
        )
    return dict(prompts), default


def read_st_transformer(path: Path, task: str = "feature-extraction") -> int | None:
    """``max_seq_length`` of a Transformer module's config; refuses tasks ctxemb does not run."""
    config = read_object(path)
    saved = config.get("transformer_task", "feature-extraction")
    if saved != task:
        raise UnsupportedModelError(
            f"{path}: transformer_task {saved!r} is not supported here; ctxemb runs the "
            f"{task!r} network (its {TASKS[task]})"
        )
    if task != "feature-extraction":
        # Settings that change what a cross-encoder's tokenizer is given, which it does not apply.
        for key in ("processing_kwargs", "do_lower_case"):
            if config.get(key):
                raise UnsupportedModelError(
                    f"{path}: {key}={config[key]!r} is not supported for a cross-encoder; "
                    "ctxemb runs the folder's tokenizer as it is saved"
                )
    modality = config.get("modality_config") or {}
    text = modality.get("text") if isinstance(modality, dict) else None
    if not isinstance(modality, dict) or not isinstance(text, (dict, type(None))):
        raise MalformedModelError(f"{path}: modality_config must be an object, got {modality!r}")
    output = (text or {}).get("method_output_name", TASKS[task])
    if output != TASKS[task]:
        raise UnsupportedModelError(
            f"{path}: the text output {output!r} is not supported; ctxemb takes the network's "
            f"{TASKS[task]}"
        )
    return positive_int(config, "max_seq_length", path)


def _read_st_pooling(path: Path) -> tuple[Pooling, bool]:
    """The pooling of a Pooling module's config, and whether it pools the prompt's tokens."""
    config = read_object(path)
    mode = config.get("pooling_mode")
    if mode is None:
        for key in _ST_LEGACY_POOLING:
            if not isinstance(config.get(key, False), bool):
                raise MalformedModelError(
                    f"{path}: {key} must be true or false, got {config[key]!r}"
                )
        modes = [m for key, m in _ST_LEGACY_POOLING.items() if config.get(key)]
        mode = modes if len(modes) != 1 else modes[0]
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if not isinstance(mode, str) or mode not in _ST_POOLING:
        raise UnsupportedModelError(
            f"{path}: pooling {mode!r} is not supported; one of {sorted(_ST_POOLING)} is"
        )
    include_prompt = config.get("include_prompt", True)
    if not isinstance(include_prompt, bool):
        raise MalformedModelError(
            f"{path}: include_prompt must be true or false, got {include_prompt!r}"
        )
    return _ST_POOLING[mode], include_prompt


def _read_st_dense(folder: Path) -> DenseSpec:
    path = folder / "config.json"
    config = read_object(path)
    in_features = positive_int(config, "in_features", path)
    out_features = positive_int(config, "out_features", path)
    if in_features is None or out_features is None:
        missing = "in_features" if in_features is None else "out_features"
        raise MalformedModelError(f"{path} lacks {missing!r}")
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    check_dense_activation(activation, str(path))
    bias = config.get("bias", True)
    if not isinstance(bias, bool):
        raise MalformedModelError(f"{path}: bias must be true or false, got {bias!r}")
    if config.get("use_residual", False) is not False:
        raise UnsupportedModelError(
            f"{path}: a Dense head with a residual connection (use_residual) is not supported "
            "yet; ctxemb reproduces linear + activation heads"
        )
    _check_dense_weights(folder, in_features, out_features, bias)
    return DenseSpec(folder, in_features, out_features, str(activation))


def _check_dense_weights(folder: Path, in_features: int, out_features: int, bias: bool) -> None:
    # Only the safetensors header is read: the shapes the config promises, before any load.
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        raise MissingDependencyError(
            f"{folder}: reading a model folder's Dense head needs safetensors, which the base "
            "install leaves out (it serves exports): pip install 'ctxemb[torch]'"
        ) from None

    safetensors_files(folder)  # refuses a pickle-only head by name
    file = folder / "model.safetensors"  # what the head loads, as sentence-transformers does
    if not file.is_file():
        raise ModelNotFoundError(f"{folder}: no model.safetensors for the Dense head")
    expected = {"linear.weight": [out_features, in_features]}
    if bias:
        expected["linear.bias"] = [out_features]
    try:
        with safe_open(str(file), framework="np") as fh:
            shapes = {k: list(fh.get_slice(k).get_shape()) for k in fh.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as exc:
        raise MalformedModelError(f"{file} cannot be read as safetensors: {exc}") from None
    for name, shape in expected.items():
        if shapes.get(name) != shape:
            raise MalformedModelError(
                f"{file}: tensor {name!r} has shape {shapes.get(name)}, but its config.json "
                f"says {shape}"
            )
