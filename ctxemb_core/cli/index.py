"""``ctxemb index``: a corpus embedded into a stamped collection, synced on every run (in this
process, or by a pool of Ray actors with ``--ray``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxemb_core.cli.common import (
    DEFAULT_MODEL,
    POSITIVE,
    command_contract,
    contract_args,
    embedder,
    examples,
    index_corpus,
    load_documents,
    open_kwargs,
    open_sample_arg,
    overrides,
    ray_integration,
    remote_args,
    remote_options,
)
from ctxemb_core.cli.hybrid import check_hybrid_args, hybrid_args
from ctxemb_core.cli.stores import (
    alias_arg,
    catalog_of,
    choose_store,
    collection_or_alias,
    open_store,
    store_args,
    store_options,
    where,
)
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import InvalidInputError

if TYPE_CHECKING:
    from ctxemb_core.sync import SyncReport


#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "run the same command again: it continues where it stopped (the documents already "
    "written are kept and not embedded again)"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "index",
        help="embed a BEIR folder or a JSONL corpus into a stamped collection",
        description="Embed documents ({_id, title, text} JSONL, or a BEIR folder's corpus) into "
        "a collection stamped with the contract. Indexing again syncs: new ids are added, "
        "documents whose text changed are re-embedded and replaced, the others are left "
        "alone (reported as A added, U updated, K unchanged); an interrupted run resumes.",
        epilog=examples(
            "ctxemb index corpus.jsonl --collection docs --path ./chroma",
            "ctxemb index ./scifact --collection scifact --host 127.0.0.1 --port 8000",
            "ctxemb index corpus.jsonl --collection docs-e5 --model ./e5-small --family e5",
            "ctxemb index corpus.jsonl --collection docs --path ./chroma --delete-missing "
            "--dry-run",
        ),
    )
    p.add_argument(
        "data",
        type=Path,
        help="a BEIR folder or a .jsonl(.gz) file; with --ray also a .parquet file or a folder "
        "of *.jsonl(.gz) or *.parquet shards, which the workers read",
    )
    store_args(p, collection_required=False)
    alias_arg(p)
    p.add_argument(
        "--model",
        help=f"the model folder or name (default: {DEFAULT_MODEL}; with --url, the contract "
        "the server serves)",
    )
    p.add_argument("--batch-size", type=POSITIVE, default=512, help="documents per write (≥ 1)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="index with a pool of Ray actors into a store every actor reaches: the Chroma "
        "server at --host/--port, or PostgreSQL at --dsn (the ctxemb[ray] extra): ADDRESS is "
        "a running cluster ('auto', 'ray://head:10001'); "
        "without one, a local instance on 127.0.0.1 is started and stopped",
    )
    p.add_argument(
        "--actors", type=POSITIVE, default=1, help="indexing actors with --ray, one CPU each"
    )
    p.add_argument(
        "--delete-missing",
        action="store_true",
        help="also delete the collection's ids that the corpus does not have (after every "
        "document is written)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be added, updated, unchanged (and deleted); embed and write nothing",
    )
    open_sample_arg(p)
    remote_args(p)
    contract_args(p)
    hybrid_args(p, building=True)
    p.add_argument(
        "--set-fusion",
        action="store_true",
        help="with --hybrid and fusion options: stamp that fusion as the index's own (a "
        "query-side change; nothing is re-embedded or rebuilt)",
    )


def run(args: argparse.Namespace) -> int:

    choose_store(args)
    collection_or_alias(args)
    check_hybrid_args(args)
    if args.alias is not None:
        return _index_alias(args)
    if args.set_fusion and not args.hybrid:
        raise InvalidInputError("--set-fusion belongs to --hybrid")
    if args.ray is not None:
        if args.hybrid:
            raise InvalidInputError("--hybrid is not available with --ray yet: index without it")
        return _index_ray(args)
    corpus = load_documents(args.data)
    contract = command_contract(args)
    if args.dry_run and store_options(args.store).absent(args):
        _print_plan(args, _new_collection_plan(corpus), 0, contract)  # a first index, planned
        return 0
    # The store is reached before the model is loaded: a server that is down is said at once.
    with open_store(args, create=not args.dry_run) as (adapter, client):
        if args.dry_run and adapter.stored_or_none(client, args.collection) is None:
            _print_plan(args, _new_collection_plan(corpus), 0, contract)
            return 0
        if args.hybrid:
            return _index_hybrid(args, adapter, client, corpus, embedder(args, contract))
        collection = adapter.open_collection(
            client, args.collection, embedder(args, contract), **open_kwargs(args)
        )
        report = index_corpus(
            collection,
            corpus,
            args.batch_size,
            dry_run=args.dry_run,
            delete_missing=args.delete_missing,
        )
        _print_plan(args, report, collection.count(), contract)
    return 0


def _index_alias(args: argparse.Namespace) -> int:
    """``ctxemb index --alias``: the corpus synced into the index the alias serves, and while
    it upgrades (or keeps its previous index) into every index it writes, each under its own
    contract; the encoders are found by each index's contract. Over a hybrid index (the alias
    records its hybrid contract) every write reaches the lexical sides too, under the recipe
    the alias records: ``--hybrid`` says so, and is refused for an alias over a dense index."""
    from ctxemb_core.aliases import AliasedIndex, Encoders
    from ctxemb_core.cache import EmbeddingCache
    from ctxemb_core.cli.hybrid import recipe_given

    if args.ray is not None:
        raise InvalidInputError("--alias is not available with --ray yet")
    if args.set_fusion or (
        args.hybrid and (recipe_given(args) or args.lexical_path or args.rebuild_lexical)
    ):
        raise InvalidInputError(
            "--alias --hybrid writes under the hybrid contract the alias records: give no "
            "lexical recipe, fusion or lexical-side options (ctxemb upgrade changes them)"
        )
    if args.model is not None or overrides(args):
        raise InvalidInputError(
            "--alias writes under the contracts of the indexes it names: give no --model or "
            "contract options (ctxemb upgrade changes an alias's contract)"
        )
    corpus = load_documents(args.data)
    remote = remote_options(args)
    url = remote.pop("url", None)
    cache = None if args.no_cache else EmbeddingCache()
    encoders = Encoders(*([url] if url else []), find=True, cache=cache, **remote)
    with open_store(args, create=False) as (adapter, client):
        aliased = AliasedIndex.open(catalog_of(adapter, client), args.alias, encoders)
        hybrid = aliased.record.target.hybrid
        if args.hybrid and hybrid is None:
            raise InvalidInputError(
                f"alias {args.alias!r} serves {aliased.record.target}, a dense index: it has "
                "no lexical side (index without --hybrid)"
            )
        report = index_corpus(
            aliased,
            corpus,
            args.batch_size,
            dry_run=args.dry_run,
            delete_missing=args.delete_missing,
        )
        args.collection = aliased.record.target.index
        _print_plan(args, report, aliased.count(), aliased.contract)
        written = [t.index for t in aliased.record.written()]
        if hybrid is not None and not args.dry_run:
            pair = aliased.hybrid
            sides = "" if pair is None else f"{len(pair.lexical)} documents, "
            print(
                f"  lexical side: {sides}{hybrid.lexical.describe()}; fusion "
                f"{hybrid.fusion.describe()}; hybrid contract {hybrid.fingerprint[:12]}"
            )
        if len(written) > 1 and not args.dry_run:
            print(f"  alias {args.alias} wrote every change to {', '.join(written)}")
    return 0


def _index_hybrid(
    args: argparse.Namespace, adapter: Any, client: Any, corpus: Any, querier: Any
) -> int:
    """``ctxemb index --hybrid``: the dense side synced batch by batch, the lexical side with it;
    a lexical side out of step after an interrupted run is mended first."""
    from ctxemb_core.cli.hybrid import fusion_from, open_hybrid_index

    if args.set_fusion:
        hybrid = adapter.open_hybrid(
            client, args.collection, querier, lexical_path=args.lexical_path, create=False,
            **open_kwargs(args),
        )  # fmt: skip
        before = hybrid.contract.fusion
        after = hybrid.set_fusion(fusion_from(args, before)).fusion
        print(
            f"{args.collection}: fusion {before.describe()} -> {after.describe()} in {where(args)}"
        )
        return 0
    hybrid = open_hybrid_index(
        args, adapter, client, querier, create=not args.dry_run, refresh=not args.dry_run,
        **open_kwargs(args),
    )  # fmt: skip
    report = index_corpus(
        hybrid,
        corpus,
        args.batch_size,
        dry_run=args.dry_run,
        delete_missing=args.delete_missing,
    )
    _print_plan(args, report, hybrid.count(), hybrid.contract.dense)
    if not args.dry_run:
        c = hybrid.contract
        print(
            f"  lexical side: {len(hybrid.lexical)} documents, {c.lexical.describe()}; fusion "
            f"{c.fusion.describe()}; hybrid contract {c.fingerprint[:12]} in {hybrid.folder}"
        )
    return 0


def _new_collection_plan(corpus: dict[str, dict[str, str]]) -> SyncReport:
    from ctxemb_core.sync import SyncReport

    return SyncReport(added=tuple(corpus), dry_run=True)


def _print_plan(
    args: argparse.Namespace, report: SyncReport, count: int, contract: EmbeddingContract
) -> None:
    store = where(args)
    if not report.dry_run:
        print(
            f"{args.collection}: {report}; {count} documents in {store}, contract "
            f"{contract.describe()}"
        )
        return
    print(
        f"{args.collection} (dry run: nothing embedded or written): would be {report}; "
        f"{count} documents now in {store}, contract {contract.describe()}"
    )
    for label, ids in (
        ("add", report.added),
        ("update", report.updated),
        ("delete", report.deleted),
    ):
        if ids:
            shown = ", ".join(ids[:10]) + (f" … ({len(ids) - 10} more)" if len(ids) > 10 else "")
            print(f"  {label}: {shown}")


def _index_ray(args: argparse.Namespace) -> int:
    """``ctxemb index --ray``: Ray actors embed and write; a summary of what they did."""
    from tqdm.auto import tqdm

    job = ray_integration()
    options = store_options(args.store)
    options.check_arguments(args)
    # Where every actor writes: the store's session (a picklable address and name), given by
    # its adapter only for options that every node of a cluster can reach.
    session = getattr(options, "ray_session", None)
    if session is None:
        raise InvalidInputError(f"--ray cannot write to the {args.store} store")
    store = session(args, args.collection)
    contract = command_contract(args)
    with tqdm(unit="docs", desc="indexing (ray)", disable=args.dry_run) as bar:
        summary = job.index_with_ray(
            args.data,
            contract,
            store=store,
            address=args.ray or None,
            actors=args.actors,
            batch_size=args.batch_size,
            cache=not args.no_cache,
            progress=bar.update,
            delete_missing=args.delete_missing,
            dry_run=args.dry_run,
            **remote_options(args),
        )
    done = f"{summary.added} added, {summary.updated} updated, {summary.skipped} unchanged"
    if summary.deleted:
        done += f", {len(summary.deleted)} deleted"
    store = where(args)
    if summary.dry_run:
        print(
            f"{args.collection} (dry run: nothing embedded or written): would be {done}; "
            f"{summary.count} documents now in {store}, contract {contract.describe()}"
        )
        return 0
    print(
        f"{args.collection}: {done}, {summary.failed} failed; {summary.count} documents in "
        f"{store}, contract {contract.describe()}"
    )
    for reason, n in summary.reasons.items():
        print(f"  failed {n}: {reason}")
    if summary.failed:
        print("  run the same command again to write the failed documents")
    return 1 if summary.failed else 0
