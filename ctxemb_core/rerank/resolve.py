"""Reading a reranker's contract from its folder, or from its token encoder's contract.

A cross-encoder folder says how its logits become a score (sentence-transformers' CrossEncoder
saves the activation) and how long a pair may be; a plain transformers sequence-classification
folder says nothing about the activation, and ctxemb never guesses it. A late-interaction
reranker takes its model, weights and truncation from the token encoder's
:class:`~ctxemb_core.EmbeddingContract`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import (
    InvalidContractError,
    InvalidInputError,
    MalformedModelError,
    UnsupportedModelError,
)
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import ModelLayout, classification_architecture, read_layout
from ctxemb_core.folders.locate import locate_model, register_model
from ctxemb_core.remedy import Said
from ctxemb_core.rerank.contract import (
    Activation,
    PairFormat,
    RerankerContract,
    RerankKind,
    SkipTokens,
)
from ctxemb_core.resolve import contract_for
from ctxemb_core.validate import check_positive_int

__all__ = ["SAVED_ACTIVATIONS", "rerank_contract_for"]

#: The activations sentence-transformers' CrossEncoder saves (as import paths), and what each is
#: under a contract. Any other path is refused: its code would have to be run to know it.
SAVED_ACTIVATIONS: dict[str, Activation] = {
    "torch.nn.modules.activation.Sigmoid": Activation.SIGMOID,
    "torch.nn.modules.linear.Identity": Activation.NONE,
    "torch.nn.modules.activation.Softmax": Activation.SOFTMAX,
}
_DEFAULT_SKIP = (SkipTokens.MARKER, SkipTokens.SPECIAL)
# What sentence-transformers reads as "no limit" in a tokenizer, when a folder names none.
_FALLBACK_TOKENS = 512


def rerank_contract_for(
    model: str | os.PathLike[str] | EmbeddingContract,
    *,
    kind: RerankKind | str | None = None,
    name: str | None = None,
    activation: Activation | str | None = None,
    label: int | None = None,
    max_tokens: int | None = None,
    pair_format: PairFormat | str | None = None,
    template: str | None = None,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
    token_normalize: bool | None = None,
    query_length: int | None = None,
    skip: tuple[SkipTokens | str, ...] | list[SkipTokens | str] | None = None,
    pooling: str | None = None,
) -> RerankerContract:
    """The reranker contract of a cross-encoder folder, or of a token encoder.

    A folder whose ``config.json`` names a ``*ForSequenceClassification`` architecture is a
    cross-encoder; an :class:`~ctxemb_core.EmbeddingContract` or an embedding model's folder
    serves late interaction (MaxSim over its token vectors). ``None`` means "not given": what
    the folder says, or the regime's default, is kept.

    Args:
        model: a cross-encoder's folder or name (found offline as
            :func:`~ctxemb_core.contract_for` finds one), an embedding model's, or the token
            encoder's embedding contract.
        kind: ``"cross_encoder"`` or ``"late_interaction"``, when the folder should not decide.
        name: the identity to record for a local folder (its folder name otherwise).
        activation: cross-encoder: ``"none"``, ``"sigmoid"`` or ``"softmax"``; read from a
            sentence-transformers CrossEncoder folder (its saved activation, or the documented
            default: sigmoid for one label, none otherwise), required for a plain transformers
            folder.
        label: cross-encoder with several labels: the index of the label that scores relevance.
        max_tokens: truncation of a pair (cross-encoder; the folder's limit, as
            ``CrossEncoder.predict`` truncates, by default) or of a text (late interaction:
            the encoder's, passed to ``contract_for``).
        pair_format: cross-encoder: ``"tokenizer"`` (the tokenizer's pair encoding, the
            default) or ``"template"`` (the default when ``template`` is given).
        template: cross-encoder: one text with ``{query}`` and ``{document}``.
        query_prefix: prepended to the query (a CrossEncoder's default prompt by default).
        document_prefix: prepended to the document.
        token_normalize: late interaction: L2-normalise token vectors (default ``True``).
        query_length: late interaction: query expansion length (default none).
        skip: late interaction: tokens left out (default ``("marker", "special")``).
        pooling: late interaction from a plain transformers folder: the pooling its embedding
            contract needs (see :func:`~ctxemb_core.contract_for`).

    Returns:
        The contract; a cross-encoder folder is registered under its weights digest so that
        ``CrossEncoderReranker(contract)`` finds it.

    Raises:
        InvalidContractError: an argument of the other regime, an invalid value, a plain
            transformers cross-encoder without ``activation=``, ``max_tokens`` beyond the
            model's positions, several labels without ``label=``.
        UnsupportedModelError: a saved activation that is not one of :data:`SAVED_ACTIVATIONS`
            (pass ``activation=`` to choose one), a folder ctxemb cannot reproduce, pickled
            weights (:class:`~ctxemb_core.errors.PickledWeightsError`).
        ModelNotFoundError: no such folder.

    Example:
        >>> rerank_contract_for("./my-cross-encoder").activation  # doctest: +SKIP
        <Activation.SIGMOID: 'sigmoid'>
        >>> rerank_contract_for("./plain-classifier", activation="none")  # doctest: +SKIP
        >>> rerank_contract_for(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        ... # doctest: +SKIP
    """
    regime = _kind(model, kind)
    other: dict[str, Any]
    if regime is RerankKind.CROSS_ENCODER:
        other = {"token_normalize": token_normalize, "query_length": query_length}
        other |= {"skip": skip, "pooling": pooling}
    else:
        other = {"activation": activation, "label": label, "pair_format": pair_format}
        other |= {"template": template}
    stray = sorted(k for k, v in other.items() if v is not None)
    if stray:
        raise InvalidContractError(
            f"{stray} belong to the other regime; a {regime.value} contract does not use them"
        )
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidContractError(f"name must be a non-empty string, got {name!r}")
    if regime is RerankKind.LATE_INTERACTION:
        encoder = _encoder(model, name=name, max_tokens=max_tokens, pooling=pooling)
        return RerankerContract(
            kind=RerankKind.LATE_INTERACTION,
            model=encoder.model,
            weights=encoder.weights,
            max_tokens=encoder.max_tokens,
            query_prefix="" if query_prefix is None else query_prefix,
            document_prefix="" if document_prefix is None else document_prefix,
            encoder=encoder,
            token_normalize=True if token_normalize is None else token_normalize,
            query_length=query_length,
            # A list is the contract's tuple; anything else is left for the contract to refuse.
            skip=_DEFAULT_SKIP if skip is None else _as_tuple(skip),
        )
    assert not isinstance(model, EmbeddingContract)
    text = _model_text(model)
    folder = locate_model(text)
    layout = read_layout(folder, task="sequence-classification")
    weights = weights_digest(layout)
    register_model(weights, folder)
    assert layout.num_labels is not None
    if pair_format is None:  # a template given is a template meant
        pair_format = PairFormat.TOKENIZER if template is None else PairFormat.TEMPLATE
    form: PairFormat = PairFormat.parse(pair_format, "pair_format")
    return RerankerContract(
        kind=RerankKind.CROSS_ENCODER,
        model=name if name is not None else (folder.name if _is_dir(text) else text),
        weights=weights,
        max_tokens=_max_tokens(layout, max_tokens),
        query_prefix=_default_prompt(layout) if query_prefix is None else query_prefix,
        document_prefix="" if document_prefix is None else document_prefix,
        pair_format=form,
        template=template,
        activation=_activation(layout, activation),
        num_labels=layout.num_labels,
        label=label,
    )


def _kind(model: Any, kind: RerankKind | str | None) -> RerankKind:
    """The regime asked for, else the one the argument implies."""
    if isinstance(model, EmbeddingContract):
        regime = RerankKind.LATE_INTERACTION if kind is None else RerankKind.parse(kind, "kind")
        if regime is not RerankKind.LATE_INTERACTION:
            raise InvalidContractError(
                "an EmbeddingContract serves late interaction only; a cross-encoder contract is "
                "read from a sequence-classification folder"
            )
        return regime
    if kind is not None:
        return RerankKind.parse(kind, "kind")
    folder = locate_model(_model_text(model))
    if classification_architecture(folder) is not None:
        return RerankKind.CROSS_ENCODER
    return RerankKind.LATE_INTERACTION


def _encoder(
    model: Any, *, name: str | None, max_tokens: int | None, pooling: str | None
) -> EmbeddingContract:
    """The token encoder's contract: the one given, or the folder's."""
    if not isinstance(model, EmbeddingContract):
        return contract_for(_model_text(model), pooling=pooling, max_tokens=max_tokens, name=name)
    settings = (("name", name), ("max_tokens", max_tokens), ("pooling", pooling))
    given = [k for k, v in settings if v is not None]
    if given:
        raise InvalidContractError(
            f"{given} describe the token encoder, whose contract is given: change it "
            "(encoder.with_(...)) instead"
        )
    return model


#: Choosing a reranker's activation, for Python and for the CLI (``ctxemb query --rerank``).
_ACTIVATION = Said("activation=", "--activation")


def _activation(layout: ModelLayout, given: Activation | str | None) -> Activation:
    """The activation given, else the one the folder saved, else CrossEncoder's default."""
    if given is not None:
        return Activation.parse(given, "activation")
    saved = layout.saved_activation
    if saved is not None:
        if saved not in SAVED_ACTIVATIONS:
            raise _ACTIVATION.into(
                UnsupportedModelError,
                f"{layout.root.name} saved the activation {saved!r}, which is not one of "
                f"{sorted(SAVED_ACTIVATIONS)}; ctxemb runs no code from a folder to find out "
                "what it computes. Give {do} one of "
                + ", ".join(repr(a.value) for a in Activation),
            )
        return SAVED_ACTIVATIONS[saved]
    if layout.cross_encoder:
        # sentence-transformers' documented default for a CrossEncoder that saved none.
        return Activation.SIGMOID if layout.num_labels == 1 else Activation.NONE
    raise _ACTIVATION.into(
        InvalidContractError,
        f"{layout.root.name} is a plain transformers sequence-classification folder: it does "
        "not say how its logits become a score, and ctxemb never guesses. Give {do} one of "
        + ", ".join(repr(a.value) for a in Activation),
    )


def _max_tokens(layout: ModelLayout, given: int | None) -> int:
    """The pair truncation: given, else the folder's limit as ``CrossEncoder.predict`` applies it.

    sentence-transformers truncates at ``max_seq_length`` where the folder saves one, else at
    the tokenizer's ``model_max_length`` capped at the network's positions.
    """
    limit = layout.max_positions
    if given is not None:
        check_positive_int(given, "max_tokens", error=InvalidContractError)
        if limit is not None and given > limit:
            raise InvalidContractError(
                f"max_tokens={given} exceeds the {limit} positions the model in "
                f"{layout.root.name} has; valid values are 1..{limit}"
            )
        return given
    tokens = layout.max_seq_length or limit or _FALLBACK_TOKENS
    if limit is not None and tokens > limit:
        raise MalformedModelError(
            f"{layout.transformer}: max_seq_length={tokens} exceeds the {limit} positions the "
            f"model has; pass max_tokens= (1..{limit}) to choose the limit explicitly"
        )
    return tokens


def _default_prompt(layout: ModelLayout) -> str:
    # A CrossEncoder's default prompt goes before the first text of each pair: the query.
    return layout.prompts.get(layout.default_prompt_name or "", "")


def _as_tuple(skip: Any) -> Any:
    return tuple(skip) if isinstance(skip, list) else skip


def _model_text(model: Any) -> str:
    text = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(
            "model must be a folder path, a model name or an EmbeddingContract, got "
            f"{type(model).__name__}"
        )
    return text


def _is_dir(text: str) -> bool:
    try:
        return Path(text).expanduser().is_dir()
    except (OSError, ValueError):
        return False
