"""The decisions every hybrid adapter asks, store-agnostic: the caller's hybrid contract against
the stamp's, the analyzer against its canary, and the two sides holding the same documents.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from ctxemb_core.contract import DiffKind
from ctxemb_core.errors import (
    AnalyzerDriftError,
    ContractMismatchError,
    HybridMismatchError,
    OutOfStepError,
)
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.index import LexicalIndex
from ctxemb_core.hybrid.store import HybridStamp, load_lexical, stored_version

__all__ = [
    "check_analyzer",
    "check_caller",
    "check_in_step",
    "reload_if_moved",
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
    if diff.dense_kind not in (DiffKind.IDENTICAL, DiffKind.LABEL):
        raise ContractMismatchError(stamp.dense, caller.dense, stamped=True)
    if any(not f.startswith("dense.") for f in diff.fields):
        raise HybridMismatchError(stamp, caller, where=where)
    return stamp


def check_analyzer(stamp: HybridStamp, index: LexicalIndex) -> None:
    """The analyzer here turns the probe texts into the terms it did when the index was built.

    Raises:
        AnalyzerDriftError: another stemmer or tokenizer behaviour (a library upgrade): the
            same recipe on paper, other terms in fact.
    """
    found = index.analyzer.canary()
    if found != stamp.analyzer_canary:
        raise AnalyzerDriftError(
            "the lexical analyzer here turns the canary texts into other terms than when the "
            f"index was built (canary {found} != {stamp.analyzer_canary}): the same recipe on "
            "paper, another stemmer or tokenizer in fact (a PyStemmer or bm25s upgrade). Install "
            "the versions the index was built with, or rebuild the lexical side "
            "(ctxemb index --hybrid).",
            found=found,
            expected=stamp.analyzer_canary,
        )


def step_differences(
    lexical: LexicalIndex, dense: Mapping[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """``(only_dense, only_lexical, changed)``: ids on one side only, and ids whose text digest
    differs between the sides (``dense`` maps each dense id to its stored text digest)."""
    lex = dict(zip(lexical.ids, lexical.digests, strict=True))
    only_dense = sorted(set(dense) - set(lex))
    only_lexical = sorted(set(lex) - set(dense))
    changed = sorted(i for i in set(dense) & set(lex) if dense[i] != lex[i])
    return only_dense, only_lexical, changed


def check_in_step(lexical: LexicalIndex, dense: Mapping[str, str], *, where: str) -> None:
    """Both sides hold the same documents with the same texts.

    Raises:
        OutOfStepError: naming the ids on one side only and the ids whose texts differ.
    """
    only_dense, only_lexical, changed = step_differences(lexical, dense)
    if only_dense or only_lexical or changed:
        raise OutOfStepError(where, only_dense, only_lexical, changed)


def same_count(lexical: LexicalIndex, dense_count: int, *, where: str) -> None:
    """The cheap per-call check: both sides hold as many documents (full check on open)."""
    if dense_count != len(lexical):
        raise OutOfStepError(where, (), (), (), counts=(dense_count, len(lexical)))


def reload_if_moved(
    folder: str | os.PathLike[str],
    seen: HybridStamp | None,
    stated: Callable[[HybridContract], HybridContract],
    *,
    where: str,
) -> tuple[LexicalIndex, HybridStamp] | None:
    """The lexical side as stored now, checked, when the folder's ``current`` pointer names
    another version than ``seen`` (another process wrote; ``None``: nothing read yet); ``None``
    when it does not (one small file read).

    ``stated`` gives, from the stored stamp's contract, the contract the reader states (its own
    recipe where it named one): it must be the stamp's (:func:`check_caller`), and the analyzer
    here must still make the stamp's terms (:func:`check_analyzer`).
    """
    if seen is not None and stored_version(folder) == seen.version:
        return None
    index, stamp = load_lexical(folder)
    check_caller(stamp.contract, stated(stamp.contract), where=where)
    check_analyzer(stamp, index)
    return index, stamp
