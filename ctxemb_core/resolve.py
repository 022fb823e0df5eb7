"""Derive a contract from a model folder: the layer "folder -> contract" above the folders.

:func:`contract_for` reads what a model folder says about itself (sentence-transformers'
``modules.json``, ``1_Pooling/config.json``, a ``Normalize`` module, saved prompts,
``max_seq_length``) and digests the files that decide its vectors. What a folder does not say is
never guessed: a plain transformers folder needs ``pooling=`` from the caller. A static model's
folder gets a static contract (:func:`static_contract`), an export's folder the contract it was
exported under (:func:`export_contract`).

Finding, reading and digesting folders is :mod:`ctxemb_core.folders`' (``locate_model``,
``read_layout``, ``weights_digest``, ...); those names stay importable from here.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxemb_core._files import cache_dir
from ctxemb_core.backends.static import check_vocabulary
from ctxemb_core.contract import (
    MAX_CONTRACT_INT,
    EmbeddingContract,
    Pooling,
    Precision,
    Quantization,
    canonical_layers,
)
from ctxemb_core.errors import InvalidContractError, MalformedModelError, Remedy, Step
from ctxemb_core.folders.digests import (
    MAX_TOKENIZER_FILE,
    check_tokenizer_files,
    safetensors_files,
    weights_digest,
)
from ctxemb_core.folders.layouts import (
    MAX_CONFIG_JSON as MAX_CONFIG_JSON,
)
from ctxemb_core.folders.layouts import (
    TASKS,
    ModelLayout,
    classification_architecture,
    read_layout,
)
from ctxemb_core.folders.locate import (
    ALIASES,
    as_dir,
    known_model,
    locate_model,
    model_text,
    register_model,
)
from ctxemb_core.folders.locate import BUNDLED as BUNDLED
from ctxemb_core.folders.locate import _not_found as _not_found
from ctxemb_core.folders.manifest import is_export, read_manifest
from ctxemb_core.folders.st_modules import DenseSpec as DenseSpec
from ctxemb_core.folders.static import is_static_folder, read_static_layout, static_digest

if TYPE_CHECKING:
    from ctxemb_core.rerank.contract import RerankerContract

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

# Names that lived here before the folder formats moved to ctxemb_core.folders (issue 26) are
# imported above ``as`` themselves, and kept importable from here for this release.
_ALIASES = ALIASES
# The cache directory is shared with the embedding cache and the ONNX export; ``cache_dir`` is
# its public home, the old private name stays importable.
_cache_dir = cache_dir

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

_DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus", "doc")


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


def _served_contract(url: str, arguments: dict[str, Any]) -> EmbeddingContract:
    """The contract ``ctxemb serve`` at ``url`` serves; contract options cannot change it."""
    from ctxemb_core.remote import server_contract

    given = sorted(k for k, v in arguments.items() if k not in ("model", "text") and v is not None)
    if given:
        options = {k: arguments[k] for k in given}
        raise InvalidContractError(
            f"contract options ({', '.join(given)}) apply to a model folder; a server's contract "
            "is the one it serves. ",
            remedies=(
                Remedy.of(Step.SERVE, fields=given, server=url, model="<model>", **options),
                Remedy.of(Step.USE_SERVER_CONTRACT, fields=given, server=url),
            ),
        )
    return server_contract(url).contract


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
            static contract (:func:`static_contract`). An ``http(s)://host:port`` URL of
            ``ctxemb serve`` gives the contract that server serves.
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
        >>> contract_for("http://127.0.0.1:8080")  # ctxemb serve's contract  # doctest: +SKIP
    """
    text = model_text(model, "model")
    if text.startswith(("http://", "https://")):
        return _served_contract(text, locals())
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
    qtext = None if query_encoder is None else model_text(query_encoder, "query_encoder")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidContractError(f"name must be a non-empty string, got {name!r}")
    if family is not None and (not isinstance(family, str) or family not in FAMILY_PRESETS):
        raise InvalidContractError(
            f"family={family!r} is not known; valid values are {sorted(FAMILY_PRESETS)}"
        )
    exported = as_dir(text)
    if exported is not None and is_export(exported):
        return _export_contract(exported, given, name=name, family=family, query_encoder=qtext)

    folder = locate_model(text)
    if is_static_folder(folder):
        # A lookup table in model2vec's format, not a network.
        label = name if name is not None or as_dir(text) else ALIASES.get(text, text)
        return static_contract(folder, given, name=label, family=family, query_encoder=qtext)
    layout = read_layout(folder)
    weights = weights_digest(layout)
    if name is None and as_dir(text):
        # A folder is named for the known model it is a copy of (same weights digest), so a
        # copied or moved folder makes the contract the original makes; else for itself.
        name = known_model(weights) or folder.name
    elif name is None:
        name = ALIASES.get(text, text)
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
            known_model(fields["query_weights"]) or qfolder.name if as_dir(qtext) else qtext
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
    registered under its weights digest by :func:`export_contract`.
    """
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
    contract: EmbeddingContract | RerankerContract,
    width: int,
    positions: int | None,
    folder: Path,
) -> None:
    """Refuse a contract the network in ``folder`` cannot serve: another output width than the
    contract states (an embedder's ``dimension``, a cross-encoder's ``num_labels``), or more
    tokens than the network has positions. Every loader of an embedder or a reranker asks this,
    before a load and of the network loaded."""
    if isinstance(contract, EmbeddingContract):
        field, found, maker = "dimension", f"{folder} emits", "contract_for"
    else:  # a reranker's (imported only for types: the rerank package builds on this module)
        field, found, maker = "num_labels", f"the network in {folder} has", "rerank_contract_for"
    stated = getattr(contract, field)
    if width != stated:
        raise InvalidContractError(
            f"the contract says {field}={stated} but {found} {width}; use the contract {maker} "
            "gives for this model"
        )
    if positions is not None and contract.max_tokens > positions:
        raise InvalidContractError(
            f"max_tokens={contract.max_tokens} exceeds the {positions} positions the model in "
            f"{folder} has; valid values are 1..{positions}"
        )


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


def export_contract(path: str | os.PathLike[str]) -> EmbeddingContract:
    """The contract an export serves, read and verified, and the folder registered for it.

    After this, ``Embedder(contract)`` finds the export (by the contract's weights digest) in
    this process, as it finds a folder :func:`~ctxemb_core.contract_for` has read.

    Raises:
        ModelNotFoundError: ``path`` is not an export.
        MalformedModelError: the manifest or ``contract.json`` is damaged (names the file and
            the ``ctxemb export … --overwrite`` that makes it again).
    """
    manifest = read_manifest(path)
    register_model(manifest.contract.weights, manifest.folder)
    return manifest.contract


# -- a static model's contract -----------------------------------------------------------------

#: Contract fields a static folder's contract may take from the caller. The rest describe a
#: network (a quantised graph, a separate query encoder, hidden layers): a table has none.
_STATIC_OVERRIDES = frozenset(
    {
        "pooling",
        "normalize",
        "query_prefix",
        "document_prefix",
        "truncate_dim",
        "max_tokens",
        "precision",
    }
)


def static_contract(
    folder: str | os.PathLike[str],
    given: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    family: str | None = None,
    query_encoder: str | None = None,
) -> EmbeddingContract:
    """The contract of a static folder (what :func:`~ctxemb_core.contract_for` returns for one).

    Pinned: ``weights``, the digest of the table file (with any per-token ``weights`` and
    ``mapping`` in it), ``tokenizer.json`` and ``config.json``; ``pooling="mean"`` (model2vec's
    mean over the looked-up vectors); ``normalize`` as the config says (model2vec's default:
    ``False``); ``max_tokens`` as its ``max_length`` (default 512; no limit is recorded as
    :data:`~ctxemb_core.contract.MAX_CONTRACT_INT`); the table's width as ``dimension``.

    Args:
        folder: the static model's folder.
        given: contract fields the caller chose (``contract_for``'s keywords that were given).
        name: the identity to record; default: the known model with these weights, else the
            folder's name.
        family: a prefix preset (:data:`~ctxemb_core.resolve.FAMILY_PRESETS`).
        query_encoder: refused: a static model has no separate query encoder.

    Raises:
        InvalidContractError: a field that describes a network (``quantization``, a separate
            query encoder, …) was given.
        MalformedModelError: the folder's files do not fit together.
    """
    given = dict(given or {})
    # Fields that describe a network; given at their default (a stamp's values, replayed by the
    # CLI) they change nothing and are accepted.
    network = {k: given.pop(k) for k in sorted(set(given) - _STATIC_OVERRIDES)}
    if query_encoder is not None:
        network["query_encoder"] = query_encoder
    layout = read_static_layout(folder)
    check_vocabulary(layout)
    weights = static_digest(layout)
    register_model(weights, layout.root)
    if name is None:
        name = known_model(weights) or layout.root.name
    query_prefix, document_prefix = FAMILY_PRESETS[family] if family else ("", "")
    fields: dict[str, Any] = {
        "model": name,
        "weights": weights,
        "pooling": Pooling.MEAN,
        "dimension": layout.dimension,
        "query_prefix": query_prefix,
        "document_prefix": document_prefix,
        "normalize": layout.normalize,
        "max_tokens": layout.max_length or MAX_CONTRACT_INT,
    }
    fields.update(given)
    contract = EmbeddingContract(**fields)
    refused = [
        k
        for k, v in network.items()
        if k not in _CONTRACT_FIELDS or contract.with_(**{k: v}) != contract
    ]
    if refused:
        what = f"{layout.root.name} is a static model (a lookup table, no network), so"
        raise InvalidContractError(
            f"{what} {', '.join(f'{k}=' for k in refused)} does not apply to it; a static "
            f"contract takes {', '.join(sorted(_STATIC_OVERRIDES))}",
            cli=f"{what} {', '.join('--' + k.replace('_', '-') for k in refused)} does not "
            "apply to it",
        )
    return contract
