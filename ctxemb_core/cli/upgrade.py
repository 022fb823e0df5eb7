"""``ctxemb upgrade``: an alias moved to a new contract without downtime (shadow, backfill,
gates, cutover), rolled back or its previous index retired."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxemb_core.cli.common import (
    COUNT,
    POSITIVE,
    changed,
    contract_args,
    examples,
    overrides,
    ray_integration,
    remote_args,
    remote_options,
)
from ctxemb_core.cli.hybrid import fusion_given, lexical_given, recipe_args
from ctxemb_core.cli.stores import catalog_of, open_store, store_args, store_options, where
from ctxemb_core.errors import DataFormatError, InvalidInputError

#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "every step is resumable and the alias changes in one atomic step: run the same command "
    "again to finish it, or ctxemb upgrade ALIAS --rollback"
)


def after_interrupt(args: Any) -> str:
    """:data:`AFTER_INTERRUPT` for the alias and store of this run.

    A rollback is the one step that is not safe to run again blindly: it swaps target and
    previous, so when the interrupt came after its switch had landed, the same command swaps
    the alias back onto the index the user meant to leave. ``alias show`` tells which it was.
    """
    from ctxemb_core.cli.advice import Invocation, shell_word
    from ctxemb_core.remedy import DEFAULT_TERMS

    name = shell_word(args.alias_name)
    run = Invocation.of(args)
    store = run.store(DEFAULT_TERMS) if run is not None else "<store options>"
    if getattr(args, "rollback", False):
        return (
            "the rollback switches the alias in one atomic step, which may have landed: "
            f"ctxemb alias show {name} {store} says (its last step 'rollback', at a new "
            "generation); run it again only if it did not, since a second rollback swaps the "
            "alias back"
        )
    return AFTER_INTERRUPT.replace("ALIAS", f"{name} {store}")


def add_parser(sub: Any) -> None:
    u = sub.add_parser(
        "upgrade",
        help="move an alias to a new contract without downtime (shadow, backfill, gates, cutover)",
        description="Create a shadow index under the new contract, re-embed the stored texts "
        "into it (no corpus needed; resumable), keep every write through the alias in both, "
        "check the gates (canary, id and text parity, a sample, optionally quality), then switch "
        "the alias in one step. Readers follow on their next call. The new contract is the "
        "alias's with the contract options applied, or --to (a model or a contract JSON file).",
        epilog=examples(
            "ctxemb upgrade docs --precision int8 --path ./chroma --dry-run",
            "ctxemb upgrade docs --truncate-dim 256 --path ./chroma --gate ./scifact",
            "ctxemb upgrade docs --truncate-dim 256 --host 127.0.0.1 --port 8000 --ray auto "
            "--actors 16",
            "ctxemb upgrade docs --rollback --path ./chroma",
            "ctxemb upgrade docs --retire --path ./chroma",
        ),
    )
    u.add_argument("alias_name", metavar="ALIAS", help="the alias")
    store_args(u, collection_required=False)
    u.add_argument(
        "--to",
        dest="to_contract",
        metavar="MODEL|FILE",
        help="the new model, or a contract JSON file (default: the alias's)",
    )
    steps = u.add_mutually_exclusive_group()
    steps.add_argument("--dry-run", action="store_true", help="say what would happen, and cost")
    steps.add_argument(
        "--rollback", action="store_true", help="serve the previous index again (kept in step)"
    )
    steps.add_argument(
        "--retire", action="store_true", help="drop the previous index; writes stop going to it"
    )
    steps.add_argument(
        "--no-cutover",
        action="store_true",
        help="stop after the backfill and gates; writes keep going to both indexes",
    )
    u.add_argument(
        "--gate",
        type=Path,
        metavar="PATH",
        help="a quality gate: a BEIR folder (queries and qrels: nDCG@10 relative to the current "
        "index) or a queries JSONL file (top-10 overlap)",
    )
    u.add_argument(
        "--gate-floor",
        type=float,
        default=None,
        help="the quality floor: a ratio of the current nDCG@10 (default 0.98), or the mean "
        "top-10 overlap (default 0.5)",
    )
    u.add_argument(
        "--gate-where",
        metavar="JSON",
        help="a metadata filter both indexes are searched under for the quality gate, e.g. "
        '\'{"set": "eval"}\': the records the queries were judged on, in an index that holds '
        "others too",
    )
    u.add_argument("--shadow", help="the shadow index's name (default: ALIAS-<fingerprint>)")
    u.add_argument("--sample", type=COUNT, default=None, help="records the sample gate checks")
    u.add_argument("--batch-size", type=POSITIVE, default=256, help="documents per write")
    u.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="backfill with a pool of Ray actors holding the new contract (canary-checked), "
        "as index --ray does, in a store every actor reaches: the Chroma server at "
        "--host/--port, or PostgreSQL at --dsn (the ctxemb[ray] extra): ADDRESS is a running "
        "cluster ('auto', 'ray://head:10001'); without one, a local instance on 127.0.0.1 is "
        "started and stopped",
    )
    u.add_argument(
        "--actors", type=POSITIVE, default=1, help="backfilling actors with --ray, one CPU each"
    )
    remote_args(u)
    contract_args(u)
    lexical = u.add_argument_group(
        "hybrid index",
        "An alias over a hybrid index upgrades its dense contract (the options above, --to), "
        "its lexical recipe and its fusion (these options, over the alias's), together or "
        "alone; the shadow gets both sides, its lexical side built from its stored texts.",
    )
    recipe_args(lexical, defaults=False)


def _where(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        where = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"--gate-where is not JSON: {exc}") from None
    if not isinstance(where, dict) or not where:
        raise InvalidInputError(f"--gate-where is a JSON object of metadata, got {text!r}")
    return where


def _gate(path: Path | None, floor: float | None, where: str | None = None) -> Any:
    if path is None:
        if floor is not None or where is not None:
            given = "--gate-floor" if floor is not None else "--gate-where"
            raise InvalidInputError(f"{given} needs --gate: the queries it is measured on")
        return None
    from ctxemb_core.aliases import QualityGate

    filter_ = _where(where)

    if path.is_dir():
        from ctxemb_core.eval.beir import load_beir

        data = load_beir(path)
        judged = {q: data.queries[q] for q in data.qrels if q in data.queries}
        return QualityGate(
            judged, data.qrels, floor=0.98 if floor is None else floor, where=filter_
        )
    queries: dict[str, str] = {}
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                queries[str(row["_id"])] = str(row["text"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataFormatError(
            f"--gate {path}: not a BEIR folder or a queries JSONL file "
            f'({{"_id", "text"}} per line): {exc}'
        ) from None
    return QualityGate(queries, None, floor=0.5 if floor is None else floor, where=filter_)


def _encoders(args: argparse.Namespace) -> Any:
    from ctxemb_core.aliases import Encoders
    from ctxemb_core.cache import EmbeddingCache

    remote = remote_options(args)
    url = remote.pop("url", None)
    cache = None if args.no_cache else EmbeddingCache()
    given = [url] if url else []
    return Encoders(*given, find=True, cache=cache, **remote)


def _new_contract(args: argparse.Namespace, current: Any, hybrid: bool = False) -> Any:
    from ctxemb_core.contract import load_contract
    from ctxemb_core.resolve import contract_for

    given = overrides(args)
    if args.to_contract is None:
        if hybrid and (lexical_given(args) or fusion_given(args)) and not given:
            return current  # a new lexical recipe or fusion alone
        if not given:
            raise InvalidInputError(
                "upgrade needs the new contract: contract options to change in the alias's "
                "contract (e.g. --truncate-dim 256), --to MODEL|CONTRACT.json, or over a hybrid "
                "index lexical recipe or fusion options (e.g. --k1 1.2)"
            )
        return changed(current, given)
    path = Path(args.to_contract)
    if path.suffix == ".json" and path.is_file():
        if given:
            raise InvalidInputError("--to FILE.json is the whole contract: give no options")
        return load_contract(path)
    return contract_for(args.to_contract, **given)


def _ray_backfill(args: argparse.Namespace) -> Callable[[Any, Any], Any]:
    """The backfill on Ray (``ctxemb_ray``, loaded by name as ``index --ray`` loads it), over
    the store's sessions as ``index --ray`` takes them (``ray_session``)."""
    job = ray_integration()
    options = store_options(args.store)
    session = getattr(options, "ray_session", None)
    if session is None:
        raise InvalidInputError(f"--ray cannot write to the {args.store} store")
    session(args, args.alias_name)  # refuses options a cluster's nodes cannot all reach

    def run(catalog: Any, encoders: Any) -> Any:
        from tqdm.auto import tqdm

        with tqdm(unit="doc", desc="backfilling (ray)", disable=not sys.stderr.isatty()) as bar:
            return job.backfill_with_ray(
                catalog,
                args.alias_name,
                encoders,
                sessions=lambda name: session(args, name),
                address=args.ray or None,
                actors=args.actors,
                batch_size=args.batch_size,
                cache=not args.no_cache,
                progress=bar.update,
                **remote_options(args),
            )

    return run


def _same_recipe(target: Any, contract: Any, hybrid: dict[str, Any]) -> bool:
    """Whether ``target`` is built under ``contract`` with the recipe changes ``hybrid``."""
    from ctxemb_core.contract import same_contract

    if not same_contract(target.contract, contract):
        return False
    return target.hybrid is None or all(getattr(target.hybrid, k) == v for k, v in hybrid.items())


def _hybrid_changes(args: argparse.Namespace, record: Any) -> dict[str, Any]:
    """The lexical recipe and fusion options given, over the alias's (``{}``: none given)."""
    from ctxemb_core.cli.hybrid import fusion_from, lexical_from

    if not (lexical_given(args) or fusion_given(args)):
        return {}
    hybrid = record.target.hybrid
    if hybrid is None:
        raise InvalidInputError(
            f"alias {args.alias_name!r} serves a dense index ({record.target}): lexical recipe "
            "and fusion options have no lexical side to apply to"
        )
    changes: dict[str, Any] = {}
    if lexical_given(args):
        changes["lexical"] = lexical_from(args, hybrid.lexical)
    if fusion_given(args):
        changes["fusion"] = fusion_from(args, hybrid.fusion)
    return changes


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.aliases import (
        backfill,
        begin_upgrade,
        cutover,
        plan_upgrade,
        read_alias,
        retire,
        rollback,
    )
    from ctxemb_core.aliases.record import AliasState
    from ctxemb_core.index.guarded import OPEN_SAMPLE

    quality = _gate(args.gate, args.gate_floor, args.gate_where)
    encoders = _encoders(args)
    with open_store(args, create=False) as (adapter, client):
        # Before anything is changed: a store the actors cannot reach is refused, Ray missing said.
        on_ray = None if args.ray is None else _ray_backfill(args)
        catalog = catalog_of(adapter, client)
        record = read_alias(catalog, args.alias_name)
        if args.retire:
            print(retire(catalog, args.alias_name).describe())
            return 0
        if args.rollback:
            print(rollback(catalog, args.alias_name, encoders).describe())
            return 0
        hybrid = _hybrid_changes(args, record)
        if (
            record.state is AliasState.UPGRADING
            and args.to_contract is None
            and not overrides(args)
            and not hybrid
        ):
            assert record.shadow is not None
            contract = record.shadow.contract  # a re-run finishes the upgrade begun
            if record.shadow.hybrid is not None:
                hybrid = {"lexical": record.shadow.hybrid.lexical}
                hybrid["fusion"] = record.shadow.hybrid.fusion
        else:
            contract = _new_contract(args, record.target.contract, bool(hybrid))
        if record.step == "cutover" and _same_recipe(record.target, contract, hybrid):
            # A re-run of an upgrade that was cut over: done (retire or roll back next).
            print(record.describe())
            print(f"{args.alias_name}: already upgraded; --retire drops {record.previous}")
            return 0
        new = encoders.get(contract, alias=args.alias_name)
        if args.dry_run:
            print(plan_upgrade(catalog, args.alias_name, new, encoders, **hybrid).describe())
            return 0
        record = begin_upgrade(catalog, args.alias_name, new, shadow=args.shadow, **hybrid)
        assert record.shadow is not None
        print(f"{args.alias_name}: upgrading {record.target} -> {record.shadow} in {where(args)}")
        if on_ray is not None:
            report = on_ray(catalog, encoders)
        else:
            report = backfill(
                catalog,
                args.alias_name,
                encoders,
                batch=args.batch_size,
                progress=sys.stderr.isatty(),
            )
        print(f"backfill: {report.describe()}")
        sample = OPEN_SAMPLE if args.sample is None else args.sample
        if args.no_cutover:
            from ctxemb_core.aliases import check_gates

            gates = check_gates(catalog, args.alias_name, encoders, sample=sample, quality=quality)
            for gate in gates:
                print(f"gate {gate}")
            print(f"{args.alias_name}: still upgrading; writes go to both indexes")
            return 0
        record = cutover(
            catalog,
            args.alias_name,
            encoders,
            sample=sample,
            quality=quality,
            on_gate=lambda gate: print(f"gate {gate}"),
        )
    print(record.describe())
    return 0
