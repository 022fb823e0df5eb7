"""A framework component's contract and model, from the arguments that framework's users write.

Haystack users build embedders with ``model="sentence-transformers/all-MiniLM-L6-v2"`` and
LangChain users with ``model_name=...``; ctxemb's components take those too, with the contract's
options as keywords (``pooling=``, ``query_prefix=``, ``truncate_dim=``, …), and derive the
contract once with :func:`~ctxemb_core.contract_for`. A pinned ``contract=`` still works and is
what every component serialises: a model name's folder may change under it, the contract not.

:func:`component_contract` is the one place every adapter asks, so that each framework's
component stays a thin translation and all of them accept, map and refuse the same arguments.
Arguments a framework's own embedder takes that a contract cannot honour (``suffix=``, one
role's ``prefix=``, ``trust_remote_code=True``, …) are refused by name, never silently dropped.

A component holds its model as a :class:`~ctxemb_core.lazy.LazyEmbedder` or a
:class:`~ctxemb_core.rerank.LazyReranker`: :func:`component_embedder` and
:func:`component_reranker` build it from the keywords the component was given (its settings
and the contract's options, told apart here), and :func:`embedder_arguments` and
:func:`reranker_arguments` are the keywords that build it again, what each framework's
``to_dict`` (or config) writes beside its own parameters.

Example:
    >>> contract = component_contract(model="all-MiniLM-L6-v2", options={"truncate_dim": 256},
    ...                               component="ContractTextEmbedder")  # doctest: +SKIP
    >>> contract.truncate_dim  # doctest: +SKIP
    256
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ctxemb_core.contract import load_contract
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidArgumentsError, InvalidInputError
from ctxemb_core.lazy import LazyEmbedder
from ctxemb_core.rerank import (
    LazyReranker,
    Reranker,
    RerankerContract,
    RerankKind,
    load_reranker_contract,
    rerank_contract_for,
)
from ctxemb_core.resolve import contract_for

__all__ = [
    "EMBEDDER_KEYWORDS",
    "FRAMEWORK_HABITS",
    "RERANKER_KEYWORDS",
    "ContractComponent",
    "component_contract",
    "component_embedder",
    "component_reranker",
    "contract_options",
    "embedder_arguments",
    "reranker_arguments",
    "reranker_contract",
]

#: Arguments of the frameworks' own embedders (sentence-transformers' Haystack components,
#: ``HuggingFaceEmbeddings``' ``encode_kwargs``) that map onto a contract field.
_MAPPED = {"normalize_embeddings": "normalize"}

#: Arguments of the frameworks' own embedders that a contract cannot honour, with why and what
#: to do instead. ``None`` (or the framework's harmless default) for one of them is accepted as
#: "not given"; any other value is refused with this text.
FRAMEWORK_HABITS: dict[str, str] = {
    "suffix": (
        "a contract has no suffix (its recipe is prefix + text); append the suffix to the "
        "texts themselves, or leave it out"
    ),
    "trust_remote_code": (
        "ctxemb never runs a model folder's own code: only the modules it can reproduce "
        "exactly (Transformer, Pooling, Dense, Normalize) are read"
    ),
    "revision": (
        "ctxemb never downloads: the weights are pinned by the contract's digest; pass the "
        "local folder of that revision as model="
    ),
    "token": "ctxemb never downloads, so no hub token is used; leave it out",
    "model_kwargs": "ctxemb reads the network from its folder as the contract pins it",
    "tokenizer_kwargs": "the tokenizer's truncation is the contract's max_tokens=",
    "config_kwargs": "ctxemb reads the network's config from its folder as it is",
    "encode_kwargs": (
        "the contract decides how texts are encoded: pass its options as keywords "
        "(normalize=, truncate_dim=, precision=, query_prefix=, document_prefix=)"
    ),
    "query_encode_kwargs": (
        "one contract decides both roles, so the query side cannot drift from the documents': "
        "pass query_prefix= (and the contract's other options) as keywords"
    ),
    "multi_process": "ctxemb embeds in one process; use batch_size= and token_budget=",
    "cache_folder": "ctxemb never downloads; pass the model's local folder as the model",
}
# Values of the habits above that ask for nothing ctxemb does not do anyway.
_HARMLESS: dict[str, tuple[Any, ...]] = {
    "trust_remote_code": (False,),
    "multi_process": (False,),
    "local_files_only": (True, False),  # ctxemb is local-only either way
    "model_kwargs": ({},),
    "tokenizer_kwargs": ({},),
    "config_kwargs": ({},),
    "encode_kwargs": ({},),
    "query_encode_kwargs": ({},),
}
_ROLE_PREFIX = {"query": "query_prefix", "document": "document_prefix"}


def contract_options(derive: Callable[..., Any] = contract_for) -> tuple[str, ...]:
    """The contract options a component takes as keywords: ``derive``'s keyword-only
    parameters (for :func:`~ctxemb_core.contract_for`, those the CLI takes as flags)."""
    params = inspect.signature(derive).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def component_contract(
    contract: Any = None,
    model: str | os.PathLike[str] | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    component: str,
    model_keyword: str = "model",
    role: Literal["query", "document"] | None = None,
    derive: Callable[..., Any] = contract_for,
    load: Callable[[Any], Any] = load_contract,
) -> Any:
    """The contract a component is built under: ``contract=`` as given, or derived from a model.

    Args:
        contract: an :class:`~ctxemb_core.EmbeddingContract`, its ``to_dict()``, or the path of
            a contract JSON file (what ``load`` reads); ``None`` when ``model`` is given.
        model: a model name or folder, read with ``derive`` (:func:`~ctxemb_core.contract_for`).
        options: the other keywords the component was given: ``derive``'s options
            (``pooling=``, ``query_prefix=``, …; ``None`` values mean "not given"), plus
            framework habits (``normalize_embeddings=`` maps to ``normalize=``; the names in
            :data:`FRAMEWORK_HABITS` are refused unless harmless).
        component: the component's name, for the messages.
        model_keyword: how the component spells ``model`` (``"model"`` for Haystack,
            ``"model_name"`` for LangChain), for the messages.
        role: the role a framework's ``prefix=`` would set on this component (``None``: the
            component embeds both roles).
        derive, load: how a model becomes a contract and how a given contract is read (the
            reranker components pass :func:`~ctxemb_core.rerank.rerank_contract_for` and
            :func:`~ctxemb_core.rerank.load_reranker_contract`).

    Raises:
        InvalidArgumentsError: both or neither of ``contract`` and ``model``, contract options
            with a ``contract``, or a keyword no contract has (also a ``TypeError``).
        InvalidInputError: a framework habit a contract cannot honour, or a model name given
            as ``contract``.
        ModelNotFoundError, InvalidContractError, ...: from ``derive`` (a mistyped model name is
            answered with the nearest known names).
    """
    given = _options(options or {}, derive, component, role, model_keyword)
    if contract is not None and model is not None:
        raise InvalidArgumentsError(
            f"{component} got both contract= and {model_keyword}=: the contract already pins "
            f"the model and its weights. Pass one: contract= to use a pinned contract, or "
            f"{model_keyword}= (with the contract options as keywords) to derive one"
        )
    if model is not None:
        return derive(model, **given)
    if contract is None:
        raise InvalidArgumentsError(
            f"{component} needs a model: pass {model_keyword}='sentence-transformers/"
            "all-MiniLM-L6-v2' (a model name or folder; its contract is derived with "
            "contract_for), or contract= (an EmbeddingContract, its to_dict(), or a contract "
            "JSON file)"
        )
    if given:
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise InvalidArgumentsError(
            f"{component} got contract= and contract options ({shown}): a contract is fixed as "
            f"it was pinned. Pass {model_keyword}= with those options to derive a new one, or "
            f"derive it yourself ({derive.__name__}(model, {shown})) and pass it as contract="
        )
    _refuse_model_as_contract(contract, component, model_keyword)
    return load(contract)


def _options(
    options: Mapping[str, Any],
    derive: Callable[..., Any],
    component: str,
    role: str | None,
    model_keyword: str,
) -> dict[str, Any]:
    known = contract_options(derive)
    given: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key in _MAPPED and _MAPPED[key] in known:
            target = _MAPPED[key]
            if options.get(target) is not None and options[target] != value:
                raise InvalidArgumentsError(
                    f"{component} got {key}={value!r} and {target}={options[target]!r}; pass one"
                )
            given[target] = value
        elif key in known:
            given[key] = value
        elif key == "prefix":
            raise InvalidInputError(_prefix_advice(component, value, role))
        elif key in FRAMEWORK_HABITS or key in _HARMLESS:
            if any(value == ok and type(value) is type(ok) for ok in _HARMLESS.get(key, ())):
                continue
            raise InvalidInputError(
                f"{component} cannot honour {key}={value!r}: {FRAMEWORK_HABITS[key]}"
                + _translated(value, known)
            )
        elif key == "model" and model_keyword != "model":
            raise InvalidArgumentsError(
                f"{component} takes the model as {model_keyword}= (a model name or folder), "
                f"not model=: pass {model_keyword}=..., or contract="
            )
        else:
            raise InvalidArgumentsError(
                f"{component} got an unexpected keyword {key}={value!r}; the contract options "
                f"it takes are {', '.join(known)}"
            )
    return given


def _translated(value: Any, known: tuple[str, ...]) -> str:
    """For a dict of a framework's settings, the keywords that say the same to ctxemb."""
    if not isinstance(value, Mapping):
        return ""
    same = {**_MAPPED, **{k: k for k in known}, "batch_size": "batch_size", "device": "device"}
    kept = [f"{same[k]}={v!r}" for k, v in value.items() if k in same]
    return f" (here: pass {', '.join(kept)} as keywords)" if kept else ""


def _prefix_advice(component: str, value: Any, role: str | None) -> str:
    field = _ROLE_PREFIX.get(role or "", "query_prefix= or document_prefix")
    here = f"{field}={value!r}" if role else f"{field}="
    return (
        f"{component} takes no prefix=: a framework's prefix= sets one side's prefix on one "
        "component, and the other side's component would embed without it. A contract pins "
        f"both roles' prefixes: pass {here} and give every component of the pipeline the same "
        "query_prefix= and document_prefix= (or one contract=), so the indexing and the "
        "query side share one contract"
    )


def _refuse_model_as_contract(contract: Any, component: str, model_keyword: str) -> None:
    """A model's name or folder given as ``contract=`` is refused with the keyword to use.

    Refused rather than read as a name: ``contract=`` promises a pinned recipe, and a name
    resolves to whatever folder holds it now (a re-pulled model changes under the name).
    """
    if not isinstance(contract, (str, os.PathLike)):
        return
    text = os.fspath(contract)
    try:
        path = Path(text).expanduser()
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):
        return  # load() says what is wrong with it
    if is_file or (not is_dir and str(text).lower().endswith(".json")):
        return
    what = "a model folder" if is_dir else "no contract file; if it is a model name"
    raise InvalidInputError(
        f"{component}: contract={text!r} is {what}, pass {model_keyword}={text!r} (its "
        "contract is derived with contract_for; pass contract options such as pooling= as "
        "keywords). contract= takes a pinned contract: an EmbeddingContract, its to_dict(), "
        "or the path of a contract JSON file"
    )


class ContractComponent:
    """A framework component bound to one contract: its fingerprint, and a repr that names it.

    A plain mixin (no framework, no pydantic), listed before the framework's base class; the
    component sets ``contract``. ``_shown()`` adds settings to the repr.

    Example:
        >>> embeddings = ContractEmbeddings(model_name="all-MiniLM-L6-v2")  # doctest: +SKIP
        >>> embeddings.fingerprint[:12], repr(embeddings)[:40]  # doctest: +SKIP
        ('d9c7a9c1a5b1', 'ContractEmbeddings(sentence-transformers')
    """

    if TYPE_CHECKING:
        contract: Any

    @property
    def fingerprint(self) -> str:
        """The contract's fingerprint: what the component stamps on what it returns."""
        return str(self.contract.fingerprint)

    def _shown(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        shown = [self.contract.describe(), *(f"{k}={v!r}" for k, v in self._shown().items())]
        return f"{type(self).__name__}({', '.join(shown)})"


#: The keywords of a component that are its model's settings, not the contract's options: what
#: :class:`~ctxemb_core.lazy.LazyEmbedder` (and :class:`~ctxemb_core.rerank.LazyReranker`)
#: take, except the progress bar and the cache, which each framework names its own way.
_LOCAL = {"self", "contract", "show_progress", "cache"}
EMBEDDER_KEYWORDS = tuple(n for n in inspect.signature(LazyEmbedder).parameters if n not in _LOCAL)
RERANKER_KEYWORDS = tuple(n for n in inspect.signature(LazyReranker).parameters if n not in _LOCAL)


def _split(
    keywords: Mapping[str, Any], settings: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``keywords`` as (the model's settings, the contract's options)."""
    chosen = {k: v for k, v in keywords.items() if k in settings}
    return chosen, {k: v for k, v in keywords.items() if k not in settings}


def component_embedder(
    contract: Any,
    model: str | os.PathLike[str] | None,
    keywords: Mapping[str, Any],
    *,
    show_progress: bool | None = None,
    cache: Any = False,
    **how: Any,
) -> LazyEmbedder:
    """The embedder a framework component holds, from the arguments its users wrote.

    Args:
        contract, model: as :func:`component_contract`'s.
        keywords: the component's other keywords: the embedder's settings
            (:data:`EMBEDDER_KEYWORDS`: ``path=``, ``backend=``, ``device=``, ``batch_size=``,
            ``token_budget=``, ``url=``, ``api=``, ``api_key_env=``, ``served_model=``; left
            out, the Embedder's defaults) and the contract's options.
        show_progress, cache: as :class:`~ctxemb_core.lazy.LazyEmbedder`'s.
        how: :func:`component_contract`'s keywords (``component=``, ``model_keyword=``,
            ``role=``).

    Raises:
        InvalidArgumentsError, InvalidInputError: as :func:`component_contract`, and a setting
            the Embedder cannot run with (checked now, nothing loaded).
    """
    settings, options = _split(keywords, EMBEDDER_KEYWORDS)
    resolved = component_contract(contract, model, options, **how)
    return LazyEmbedder(resolved, show_progress=show_progress, cache=cache, **settings)


def embedder_arguments(lazy: LazyEmbedder) -> dict[str, Any]:
    """The keywords that build ``lazy`` again, JSON-ready: the contract (as it resolved, so a
    reloaded component embeds as this one did), ``path``, the run settings and, for a server,
    ``url``, ``api``, ``api_key_env`` (the variable's name, never the key), ``served_model``."""
    config = lazy.config
    out = {"contract": config["contract"], "path": config["path_hint"]}
    out |= {k: config[k] for k in Embedder.run_settings.names}
    remote = config.get("remote")
    if remote is not None:
        out |= {k: remote[k] for k in ("url", "api", "api_key_env")}
        if remote.get("served_model") is not None:
            out["served_model"] = remote["served_model"]
    return out


def reranker_contract(
    contract: Any,
    model: str | os.PathLike[str] | None,
    options: Mapping[str, Any],
    *,
    component: str,
    kind: RerankKind,
    model_keyword: str = "model",
    others: Mapping[RerankKind, str] | None = None,
) -> RerankerContract:
    """The reranker contract of a component that takes one regime (``kind``).

    Args:
        contract, model, options, component, model_keyword: as :func:`component_contract`'s,
            read with :func:`~ctxemb_core.rerank.rerank_contract_for` and
            :func:`~ctxemb_core.rerank.load_reranker_contract`.
        kind: the regime the component takes.
        others: the framework's component for each other regime, named in the refusal.

    Raises:
        InvalidInputError: a contract of another regime (and as :func:`component_contract`).
    """
    found = component_contract(
        contract,
        model,
        options,
        component=component,
        model_keyword=model_keyword,
        derive=rerank_contract_for,
        load=load_reranker_contract,
    )
    if found.kind is not kind:
        other = (others or {}).get(found.kind)
        use = f"; use {other} for it" if other else " (each regime has its own component)"
        raise InvalidInputError(
            f"{component} takes a {kind.value} contract, got a {found.kind.value} one{use}"
        )
    return found


def component_reranker(
    contract: Any,
    model: str | os.PathLike[str] | None,
    keywords: Mapping[str, Any],
    *,
    show_progress: bool | None = None,
    **how: Any,
) -> LazyReranker:
    """The reranker a framework component holds, from the arguments its users wrote.

    ``keywords`` holds the reranker's settings (:data:`RERANKER_KEYWORDS`, checked now; left
    out, the reranker's defaults) and the contract's options; ``how`` is
    :func:`reranker_contract`'s keywords (``component=``, ``kind=``, ``model_keyword=``,
    ``others=``).
    """
    settings, options = _split(keywords, RERANKER_KEYWORDS)
    found = reranker_contract(contract, model, options, **how)
    return LazyReranker(found, show_progress=show_progress, **settings)


def reranker_arguments(lazy: LazyReranker) -> dict[str, Any]:
    """The keywords that build ``lazy`` again, JSON-ready: the contract, ``path`` and the run
    settings."""
    config = lazy.config
    out = {"contract": config["contract"], "path": config["path_hint"]}
    return out | {k: config[k] for k in Reranker.run_settings.names}
