"""The ``--hybrid`` options shared by ``ctxemb index``, ``query`` and ``eval``: the lexical recipe
and the fusion, each option ``None`` unless given (a query takes the stamp's; a new index the
defaults)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ctxemb_core.errors import CtxembError, InvalidInputError


def hybrid_args(p: argparse.ArgumentParser, *, building: bool, stored: bool = True) -> None:
    group = p.add_argument_group(
        "hybrid retrieval",
        "BM25 beside the dense contract, fused; the lexical recipe and the fusion are stamped "
        "with the index"
        + (
            " (defaults: bm25s' Lucene BM25 k1 1.5, b 0.75, English stemmer and stop words; "
            "reciprocal-rank fusion, k 60, depth 100)."
            if building
            else "; a recipe option given here must be the stamp's, or the query is refused."
        ),
    )
    group.add_argument(
        "--hybrid",
        action="store_true",
        help="build (index) or use (query, eval) the lexical side and fuse",
    )
    if stored:
        group.add_argument(
            "--lexical-path",
            type=Path,
            help="Chroma: the lexical side's folder (its SQLite file; default for an embedded "
            "store: PATH/ctxemb-lexical/COLLECTION; required for a server). PostgreSQL keeps "
            "the lexical side in the table's database and needs none (given, it names an old "
            "lexical folder to convert once)",
        )
    if stored and building:
        group.add_argument(
            "--rebuild-lexical",
            action="store_true",
            help="drop the lexical side and build it again from the dense side's stored texts "
            "under the recipe options given (a lost, replaced or damaged side; another recipe)",
        )
    recipe_args(group)


def recipe_args(group: Any, *, defaults: bool = True) -> None:
    """The lexical recipe's and the fusion's options (``defaults``: say a new index's)."""

    def default(text: str) -> str:
        return f" (default {text})" if defaults else ""

    group.add_argument("--k1", type=float, help="BM25 k1" + default("1.5"))
    group.add_argument("--b", type=float, help="BM25 b" + default("0.75"))
    group.add_argument(
        "--stemmer", choices=["english", "none"], help="Snowball stemmer" + default("english")
    )
    group.add_argument("--stopwords", choices=["en", "none"], help="stop-word list" + default("en"))
    group.add_argument("--fusion", choices=["rrf", "weighted"], help="how to fuse" + default("rrf"))
    group.add_argument("--rrf-k", type=int, help="the rrf constant" + default("60"))
    group.add_argument(
        "--weights",
        help="weighted fusion: DENSE,LEXICAL (min-max normalised scores), e.g. 0.5,0.5",
    )
    group.add_argument(
        "--depth", type=int, help="candidates per side before fusing" + default("100")
    )


_RECIPE = ("k1", "b", "stemmer", "stopwords")
_FUSION = ("fusion", "rrf_k", "weights", "depth")


def check_hybrid_args(args: argparse.Namespace) -> None:
    """Recipe options without ``--hybrid`` are refused (they would be ignored)."""
    given = [o for o in (*_RECIPE, *_FUSION, "lexical_path") if getattr(args, o, None) is not None]
    if getattr(args, "rebuild_lexical", False):
        given.append("rebuild_lexical")
    if given and not args.hybrid:
        options = ", ".join("--" + o.replace("_", "-") for o in given)
        raise InvalidInputError(f"{options} belong to hybrid retrieval: add --hybrid")


def lexical_from(args: argparse.Namespace, base: Any = None) -> Any:
    """The lexical recipe: ``base``'s (a stamp's, or the defaults) with the options given."""
    from ctxemb_core.hybrid import LexicalContract

    given = {o: getattr(args, o) for o in _RECIPE if getattr(args, o, None) is not None}
    return (base.recipe() if base is not None else LexicalContract()).with_(**given)


def fusion_from(args: argparse.Namespace, base: Any = None) -> Any:
    """The fusion: ``base``'s (a stamp's, or RRF k 60) with the options given."""
    from ctxemb_core.hybrid import Fusion

    base = base or Fusion()
    method = args.fusion or base.method
    values = {**base.to_dict(), "method": method}
    if args.depth is not None:
        values["depth"] = args.depth
    if method == "rrf":
        if args.weights is not None:
            raise InvalidInputError("--weights belongs to --fusion weighted")
        k = args.rrf_k if args.rrf_k is not None else (base.k if base.method == "rrf" else None)
        values.update(k=k or 60, weights=None, normalization=None)
    else:
        if args.rrf_k is not None:
            raise InvalidInputError("--rrf-k belongs to --fusion rrf")
        weights = _weights(args.weights) if args.weights else base.weights
        if weights is None:
            raise InvalidInputError("--fusion weighted needs --weights DENSE,LEXICAL")
        values.update(k=None, weights=weights, normalization=base.normalization or "minmax")
    return Fusion.from_dict({**values, "weights": list(values["weights"] or []) or None})


def recipe_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, o, None) is not None for o in (*_RECIPE, *_FUSION))


def lexical_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, o, None) is not None for o in _RECIPE)


def fusion_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, o, None) is not None for o in _FUSION)


def _weights(text: str) -> tuple[float, float]:
    try:
        dense, lexical = (float(x) for x in text.split(","))
    except ValueError:
        raise InvalidInputError(
            f"--weights must be DENSE,LEXICAL (two numbers), got {text!r}"
        ) from None
    return dense, lexical


def open_hybrid_index(
    args: argparse.Namespace,
    adapter: Any,
    client: Any,
    contract: Any,
    *,
    create: bool,
    refresh: bool = False,
    progress: Any = None,
    recorded: Any = None,
    **open_options: Any,
) -> Any:
    """The store adapter's ``open_hybrid``; the options' recipe builds a new index and must be
    the stamp's for an existing one (each option over the stamp's value: only what is given is
    compared). ``recorded``: the hybrid contract an alias records for the index, which the
    stamp must hold too (an index rebuilt under another recipe behind the alias is refused)."""
    from ctxemb_core.hybrid.guard import check_caller

    if not hasattr(adapter, "open_hybrid"):
        raise InvalidInputError(f"--hybrid is not available for --store {args.store}")
    from ctxemb_core.errors import DamagedStampError
    from ctxemb_core.hybrid import NoLexicalSideError

    rebuild = bool(getattr(args, "rebuild_lexical", False))
    options = {
        "lexical_path": args.lexical_path,
        "refresh": refresh,
        "progress": progress,
        **open_options,
    }
    index = None
    if not rebuild and adapter.stored_or_none(client, args.collection) is not None:
        try:
            index = adapter.open_hybrid(client, args.collection, contract, create=False, **options)
        except NoLexicalSideError as exc:
            if not create:
                raise _spelled(exc, args) from None
        except DamagedStampError as exc:  # a lost side: rebuilt only on request
            raise _spelled(exc, args) from None
    if index is None:
        # A new lexical side (or one rebuilt on request): under the options' recipe.
        index = adapter.open_hybrid(
            client,
            args.collection,
            contract,
            lexical=lexical_from(args),
            fusion=fusion_from(args),
            create=create,
            rebuild=rebuild,
            **options,
        )
    if recorded is not None:
        stamp = index.contract
        check_caller(
            stamp,
            stamp.with_(lexical=recorded.lexical, fusion=recorded.fusion),
            where=repr(index.name),
        )
    if recipe_given(args):
        stamp = index.contract
        caller = stamp.with_(
            lexical=lexical_from(args, stamp.lexical), fusion=fusion_from(args, stamp.fusion)
        )
        check_caller(stamp, caller, where=repr(index.name))
    return index


def _spelled(exc: CtxembError, args: argparse.Namespace) -> CtxembError:
    """``exc`` (no lexical side, or a lost one) with its command spelled out for this store and
    collection.

    The stock advice, ``ctxemb index --hybrid`` (``--rebuild-lexical``), run as printed, is
    refused for its missing corpus and collection, and would index into ``./chroma`` whatever
    store was queried. The corpus must be the one the index was made from: indexing syncs, so
    another would add its documents.
    """
    from ctxemb_core.cli.advice import Invocation, shell_word
    from ctxemb_core.remedy import BUILD_LEXICAL_SIDE, DEFAULT_TERMS, REBUILD_LEXICAL_SIDE

    run = Invocation.of(args)
    if run is None:
        return exc
    target = f"{run.store(DEFAULT_TERMS)} --collection {shell_word(args.collection)}"
    line = f"ctxemb index <the corpus it was indexed from> --hybrid {target}"
    cli = exc.message_for("cli")
    if REBUILD_LEXICAL_SIDE.cli in cli:
        cli = cli.replace(REBUILD_LEXICAL_SIDE.cli, f"{line} --rebuild-lexical")
    elif BUILD_LEXICAL_SIDE.cli in cli:
        cli = cli.replace(BUILD_LEXICAL_SIDE.cli, line)
    else:  # another refusal (the dense side's): its own advice stands
        return exc
    return type(exc)(str(exc), cli=cli)
