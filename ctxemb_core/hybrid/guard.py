"""The decisions every hybrid adapter asks, store-agnostic: the caller's hybrid contract against
the stamp's, the analyzer against its canary, and the two sides holding the same documents.
"""

from __future__ import annotations

from collections.abc import Mapping

from ctxemb_core.contract import same_contract
from ctxemb_core.errors import (
    AnalyzerDriftError,
    ContractMismatchError,
    HybridMismatchError,
    OutOfStepError,
)
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.fusion import Fusion
from ctxemb_core.hybrid.lexical import Analyzer, LexicalContract
from ctxemb_core.hybrid.store import HybridStamp
from ctxemb_core.remedy import REBUILD_LEXICAL_SIDE

__all__ = [
    "check_analyzer",
    "check_caller",
    "check_in_step",
    "check_recipe",
    "same_count",
    "step_differences",
]


def check_caller(
    stamp: HybridContract, caller: HybridContract | None, *, where: str = "the index"
) -> HybridContract:
    """The contract to query with: the stamp's, once ``caller`` (if given) is found to be it.

    Raises:
        ContractMismatchError: the dense side differs (as the dense guard says it, field named;
            a label-only change over the same weights passes, as it does there).
        HybridMismatchError: the lexical recipe or the fusion differs, each field named with
            its side (``lexical.stemmer``, ``fusion.k``).
    """
    if caller is None:
        return stamp
    diff = stamp.diff(caller)
    if not same_contract(stamp.dense, caller.dense):
        raise ContractMismatchError(stamp.dense, caller.dense, stamped=True)
    if any(not f.startswith("dense.") for f in diff.fields):
        raise HybridMismatchError(stamp, caller, where=where)
    return stamp


def check_recipe(
    stamp: HybridContract,
    lexical: LexicalContract | None = None,
    fusion: Fusion | None = None,
    *,
    where: str = "the index",
) -> HybridContract:
    """:func:`check_caller` for a caller that states only a lexical recipe and a fusion (each
    ``None``: the stamp's), as a framework's hybrid retriever does."""
    caller = stamp.with_(
        lexical=lexical if lexical is not None else stamp.lexical,
        fusion=fusion if fusion is not None else stamp.fusion,
    )
    return check_caller(stamp, caller, where=where)


def check_analyzer(stamp: HybridStamp, analyzer: Analyzer) -> None:
    """The analyzer here turns the probe texts into the terms it did when the side was built.

    Raises:
        AnalyzerDriftError: another stemmer or tokenizer behaviour (a library upgrade): the
            same recipe on paper, other terms in fact.
    """
    found = analyzer.canary()
    if found != stamp.analyzer_canary:
        raise REBUILD_LEXICAL_SIDE.into(
            AnalyzerDriftError,
            "the lexical analyzer here turns the canary texts into other terms than when the "
            f"index was built (canary {found} != {stamp.analyzer_canary}): the same recipe on "
            "paper, another stemmer or tokenizer in fact (a PyStemmer or bm25s upgrade). Install "
            "the versions the index was built with, or rebuild the lexical side ({do}).",
            found=found,
            expected=stamp.analyzer_canary,
        )


def step_differences(
    lexical: Mapping[str, str], dense: Mapping[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """``(only_dense, only_lexical, changed)``: ids on one side only, and ids whose text digest
    differs between the sides (each maps its ids to their stored text digests)."""
    only_dense = sorted(set(dense) - set(lexical))
    only_lexical = sorted(set(lexical) - set(dense))
    changed = sorted(i for i in set(dense) & set(lexical) if dense[i] != lexical[i])
    return only_dense, only_lexical, changed


def check_in_step(lexical: Mapping[str, str], dense: Mapping[str, str], *, where: str) -> None:
    """Both sides hold the same documents with the same texts.

    Raises:
        OutOfStepError: naming the ids on one side only and the ids whose texts differ.
    """
    only_dense, only_lexical, changed = step_differences(lexical, dense)
    if only_dense or only_lexical or changed:
        raise OutOfStepError(where, only_dense, only_lexical, changed)


def same_count(lexical_count: int, dense_count: int, *, where: str) -> None:
    """The cheap per-call check: both sides hold as many documents (full check on open)."""
    if dense_count != lexical_count:
        raise OutOfStepError(where, (), (), (), counts=(dense_count, lexical_count))
