"""The ``ctxemb`` command.

Store commands (Chroma, …) are reached by name and loaded on demand, so this module imports no
integration at module level.

A user's mistake never ends in a traceback: every one is a :class:`CtxembError` (argparse's own
usage errors included), printed as one ``ctxemb: error:`` line on stderr in the command line's
terms (:meth:`CtxembError.message_for` ``("cli")``), and is found before the store is touched
wherever the inputs allow it. Commands that only read a store never create one. Texts cut to
the contract's ``max_tokens`` are summed up in one ``ctxemb: note:`` line at the end. Anything
else is a bug and keeps its traceback.

Exit codes:
    0    success (also when the reader of stdout stops early, as ``| head`` does)
    1    a check failed: ``verify`` found a failed check, ``detect`` no conclusive match,
         ``index --ray`` left documents unwritten (named; run it again)
    2    bad input: one ``ctxemb: error:`` line on stderr, nothing changed
    130  interrupted (Ctrl-C); index, migrate and eval continue where they stopped
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import os
import shlex
import sys
import textwrap
import typing
import warnings
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ctxemb_core import demo as demo_data
from ctxemb_core._validate import check_text, check_texts
from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.errors import (
    CtxembError,
    DataFormatError,
    InvalidInputError,
    MissingDependencyError,
    TruncationWarning,
)

if TYPE_CHECKING:
    from ctxemb_core.sync import SyncReport

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
#: The stores the CLI has adapters for; each is the import package ``ctxemb_<store>``.
STORES = ("chroma",)
INTERRUPTED = 130  # the shell's code for a process ended by SIGINT

_EXIT_CODES = """\
exit codes:
  0    success
  1    a check failed (verify: a failed check; detect: no conclusive match;
       index --ray: documents left unwritten, run it again)
  2    bad input: one "ctxemb: error:" line on stderr, nothing changed
  130  interrupted (Ctrl-C); index, migrate and eval continue where they stopped"""


class _HelpFormatter(argparse.HelpFormatter):
    """Help that shows every option's default and keeps the examples' lines as written.

    Paragraphs (split by blank lines) are wrapped, never inside a hyphenated name or path; a
    paragraph whose lines are indented (examples, the exit codes) is printed verbatim.
    """

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            lines = block.splitlines()
            if any(line.startswith("  ") for line in lines):
                blocks.append("\n".join(indent + line for line in lines))
            else:
                flat = " ".join(block.split())
                blocks.append(
                    textwrap.fill(
                        flat,
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,
                    )
                )
        return "\n\n".join(blocks)

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        shown = default is not None and default is not False and default is not argparse.SUPPRESS
        if shown and action.option_strings and "default" not in text and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are :class:`InvalidInputError` naming the argument.

    argparse would print the usage and exit; raising instead lets :func:`main` report every user
    mistake the same way (one line, exit 2) and lets in-process callers catch it. Every parser
    (subcommands' too, which argparse builds with the parent's class) shows defaults in its help.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise InvalidInputError(f"{self.prog}: {message} (see {self.prog} --help)")


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type=`` accepting integers in ``low..high``; argparse names the option."""

    def parse(text: str) -> int:
        bounds = f"{low}..{high}" if high is not None else f"≥ {low}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer {bounds}, got {text!r}"
            ) from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {value}")
        return value

    return parse


_POSITIVE = _int_at_least(1)
_COUNT = _int_at_least(0)
_PORT = _int_at_least(1, 65535)

# The contract flags are contract_for's keyword-only parameters, one flag each, typed and with
# choices from their annotations (enums) or the presets; this is only their help in CLI words.
_CONTRACT_HELP = {
    "name": "identity to record for a local folder (default: the known model it copies, else "
    "the folder's name)",
    "family": "instruction-prefix preset, one of: %(choices)s",
    "pooling": "how token vectors become one vector, one of: %(choices)s (default: the "
    "folder's; required for a plain transformers folder)",
    "normalize": "L2-normalise the vectors (default: the folder's Normalize module, else yes)",
    "query_prefix": "text prepended to every query (wins over --family)",
    "document_prefix": "text prepended to every document (wins over --family)",
    "truncate_dim": "keep this many leading components (Matryoshka), before normalising",
    "max_tokens": "tokenizer truncation length, 1 up to the model's positions",
    "precision": "the vectors' numeric form, one of: %(choices)s",
    "quantization": "a lossy form of the weights, run on the onnx backend, one of: %(choices)s",
    "query_encoder": "a separate query encoder's folder or name (DPR-style pairs)",
    "layers": "hidden layers that make the token vectors: last (default), one index (-2; 0 is "
    "the embedding output), a mean (-4,-3,-2,-1 or -4: for the last four) or a weighted sum "
    "(0.5*-2+0.5*-1); write --layers=-4: when the value starts with '-'",
    "include_prompt": "pool the instruction prefix's tokens with the text's (default: the "
    "folder's Pooling module, else yes; no: Instructor's pooling)",
}


def contract_parameters() -> tuple[str, ...]:
    """The contract options the CLI takes: :func:`~ctxemb_core.contract_for`'s keywords."""
    from ctxemb_core.resolve import contract_for

    params = inspect.signature(contract_for).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _contract_args(p: argparse.ArgumentParser) -> None:
    from ctxemb_core.resolve import FAMILY_PRESETS, contract_for

    hints = typing.get_type_hints(contract_for)
    group = p.add_argument_group(
        "contract options",
        "Each sets one field of the contract. A field not given comes from the model folder "
        "(float32 vectors, no quantization, unless the folder says otherwise), or for a stored "
        "collection from its stamp.",
    )
    for name in contract_parameters():
        kinds = [t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None)]
        enum = next((t for t in kinds if isinstance(t, type) and issubclass(t, Enum)), None)
        options: dict[str, Any] = {"help": _CONTRACT_HELP.get(name, name.replace("_", " "))}
        if bool in kinds:
            options.update(action=argparse.BooleanOptionalAction, default=None)
        elif enum is not None or name == "family":
            # Values are checked by argparse against the enum (or the presets) itself; a wrong
            # one is refused with the valid ones listed.
            choices = list(FAMILY_PRESETS) if enum is None else [e.value for e in enum]
            options.update(choices=choices, metavar=name.upper())
        elif int in kinds:
            options.update(type=int, metavar="N")
        group.add_argument(_flag(name), **options)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The contract options the user gave (``None``: not given)."""
    return {
        k: getattr(args, k) for k in contract_parameters() if getattr(args, k, None) is not None
    }


def _changed(stamped: EmbeddingContract, overrides: dict[str, Any]) -> EmbeddingContract:
    """``stamped`` with the user's contract options applied, validated by contract_for.

    Every field the user did not set keeps the stamp's value (a collection indexed with
    ``--truncate-dim 128`` stays at 128 when a query adds ``--query-prefix``).
    """
    from ctxemb_core.resolve import contract_for

    if not overrides:
        return stamped
    base: dict[str, Any] = {
        "name": stamped.model,
        "pooling": stamped.pooling,
        "normalize": stamped.normalize,
        "query_prefix": stamped.query_prefix,
        "document_prefix": stamped.document_prefix,
        "truncate_dim": stamped.truncate_dim,
        "max_tokens": stamped.max_tokens,
        "precision": stamped.precision,
        "quantization": stamped.quantization,
        "query_encoder": stamped.query_model,
        "layers": stamped.layers,
        "include_prompt": stamped.include_prompt,
    }
    if "family" in overrides:  # a preset replaces the stamp's prefixes (explicit ones win)
        base.pop("query_prefix")
        base.pop("document_prefix")
    keep = {k: v for k, v in base.items() if k in contract_parameters() and v is not None}
    return contract_for(stamped.model, **{**keep, **overrides})


_VERIFY_DESCRIPTION = """\
Check a collection against a contract (the given one, else the collection's own) and print a JSON
report whose "checked" and "not_checked" lists say what was proven and what was not. The checks:
the stamp is there and readable; its fingerprint equals the caller's (each differing field
listed); this encoder re-embeds the stamp's canary probes to the stored canary vectors; the
store's own embedding setting agrees with the stamp; and stored records re-embed to their stored
vectors -- a sample (--sample N: the newest half and a random half; the report gives the chance
that it finds one altered older record) or every record (--all: read page by page, progress on
stderr). Not checked: records outside the sample, records stored without their text (they cannot
be re-embedded), record metadata (not part of the contract), and anything written after the
check. Exit code 0 when every check passes; 1 when any fails, with one line on stderr naming
what failed; 2 on an error."""


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ctxemb",
        description="Contract-aware embeddings: pin the recipe, stamp the index, refuse mixes. "
        "Run ctxemb COMMAND --help for each command's options, defaults and an example.",
        epilog=_examples(
            "ctxemb demo",
            "ctxemb index corpus.jsonl --collection docs --path ./chroma",
            "ctxemb query 'how do I keep slugs off lettuce' --collection docs --path ./chroma",
        )
        + "\n\n"
        + _EXIT_CODES,
    )
    from importlib.metadata import PackageNotFoundError, version

    try:  # the installed distribution's version: the one number pip, the wheel and this agree on
        release = version("ctxemb")
    except PackageNotFoundError:  # run from a checkout that was never installed
        release = "unknown (not installed: pip install -e .)"
    parser.add_argument(
        "--version",
        action="version",
        version=f"ctxemb {release}",
        help="print ctxemb's version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "inspect",
        help="print the contract derived from a model folder or name, as JSON",
        description="Derive a model's contract (pooling, prefixes, normalisation, digest) and "
        "print it as JSON with its fingerprint.",
        epilog=_examples(
            f"ctxemb inspect {DEFAULT_MODEL}",
            "ctxemb inspect ./my-bert --pooling cls --name acme/bert",
        ),
    )
    p.add_argument("model", help=f"a folder path or an offline name such as {DEFAULT_MODEL}")
    _contract_args(p)
    p = sub.add_parser(
        "demo",
        help="index a small corpus into a stamped Chroma collection, query it, show mismatches",
        description="Index the example corpus with the bundled model into an embedded, "
        "contract-stamped Chroma collection, run the example queries, then show the collection "
        "refusing embedders under other contracts.",
        epilog=_examples("ctxemb demo", "ctxemb demo --path /tmp/demo-store --top-k 5"),
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="the model folder or name")
    p.add_argument("--corpus", type=Path, default=demo_data.corpus_path(), help="a JSONL corpus")
    p.add_argument(
        "--queries", type=Path, default=demo_data.queries_path(), help='JSONL {"text": ...}'
    )
    p.add_argument("--top-k", type=_POSITIVE, default=3, help="results per query")
    p.add_argument("--collection", default="ctxemb-demo", help="collection name")
    p.add_argument("--store", default="chroma", choices=STORES, help="the store's adapter")
    p.add_argument("--path", help=f"embedded store folder (default: {_DEMO_PATH})")
    p.add_argument("--host", help=argparse.SUPPRESS)
    p.add_argument("--port", type=_PORT, help=argparse.SUPPRESS)

    p = sub.add_parser(
        "index",
        help="embed a BEIR folder or a JSONL corpus into a stamped collection",
        description="Embed documents ({_id, title, text} JSONL, or a BEIR folder's corpus) into "
        "a collection stamped with the contract. Indexing again syncs: new ids are added, "
        "documents whose text changed are re-embedded and replaced, the others are left "
        "alone (reported as A added, U updated, K unchanged); an interrupted run resumes.",
        epilog=_examples(
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
    _store_args(p)
    p.add_argument("--model", default=DEFAULT_MODEL, help="the model folder or name")
    p.add_argument("--batch-size", type=_POSITIVE, default=512, help="documents per write (≥ 1)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="index with a pool of Ray actors into the Chroma server at --host/--port (the "
        "ctxemb[ray] extra): ADDRESS is a running cluster ('auto', 'ray://head:10001'); "
        "without one, a local instance on 127.0.0.1 is started and stopped",
    )
    p.add_argument(
        "--actors", type=_POSITIVE, default=1, help="indexing actors with --ray, one CPU each"
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
    _open_sample_arg(p)
    _contract_args(p)

    p = sub.add_parser(
        "query",
        help="query a stamped collection; prints each result's similarity",
        description="Embed the query under the collection's contract (or the one given, which "
        "must match) and print the nearest documents, best first, each with its similarity "
        "under the contract (higher is better: the cosine for a normalised contract). --json "
        'prints one object per query: {"query", "metric", "results": [{"id", "similarity", '
        '"text"}]}. With --rerank, each result also has the reranker\'s score.',
        epilog=_examples(
            "ctxemb query 'slugs in the garden' --collection demo --path ./chroma -k 3",
            "ctxemb query 'slugs' 'tyres' --collection demo --path ./chroma --json",
            "ctxemb query 'slugs' --collection demo --path ./chroma --rerank maxsim",
        ),
    )
    p.add_argument("text", nargs="+", help="one or more query texts")
    _store_args(p)
    p.add_argument("-k", "--top-k", type=_POSITIVE, default=5, help="results per query (≥ 1)")
    p.add_argument(
        "--model",
        help="query with this model's contract, which must match the index's (default: the "
        "collection's own contract, with the contract options applied)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per query")
    _rerank_args(p)
    _open_sample_arg(p)
    _contract_args(p)

    p = sub.add_parser(
        "verify",
        help="check a collection against a contract and print a report",
        description=_VERIFY_DESCRIPTION,
        epilog=_examples(
            "ctxemb verify --collection demo --path ./chroma",
            "ctxemb verify --collection demo --path ./chroma --all",
            "ctxemb verify --collection demo --host 127.0.0.1 --port 8000 --sample 0",
        ),
    )
    _store_args(p)
    p.add_argument("--model", help="the caller's model (default: the collection's own contract)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--sample",
        type=_COUNT,
        default=32,
        help="stored documents to re-embed and compare (0: stamp and canary only)",
    )
    scope.add_argument(
        "--all", action="store_true", help="re-embed and compare every stored document"
    )
    _contract_args(p)

    p = sub.add_parser(
        "migrate",
        help="re-embed a collection under a new contract into a new collection",
        description="Copy every document into a new stamped collection, re-embedded under the "
        "source's contract with the changes given (or another --model). Resumable; the source "
        "is never modified.",
        epilog=_examples(
            "ctxemb migrate --collection demo --to demo-128 --truncate-dim 128 --path ./chroma",
            "ctxemb migrate --collection demo --to demo-e5 --model ./e5-small --family e5",
        ),
    )
    _store_args(p)
    p.add_argument("--to", required=True, help="name of the new collection")
    p.add_argument("--model", help="the target model (default: the source's model)")
    p.add_argument("--batch-size", type=_POSITIVE, default=256, help="documents per write (≥ 1)")
    _open_sample_arg(p)
    _contract_args(p)

    p = sub.add_parser(
        "restamp",
        help="accept a query-side contract change on a stamped collection, deliberately",
        description="Rewrite a collection's stamp for a contract whose change leaves the stored "
        "documents valid: a new query prefix, a separate query encoder, another name for the "
        "same weights. The new contract is the stamp's with the contract options applied (or "
        "the --contract file). Any change that needs the documents re-embedded is refused: "
        "use ctxemb migrate. Prints the old and new fingerprints and each changed field.",
        epilog=_examples(
            "ctxemb restamp --collection demo --path ./chroma --query-prefix 'query: '",
            "ctxemb restamp --collection demo --host 127.0.0.1 --port 8000 --contract new.json",
        ),
    )
    _store_args(p)
    p.add_argument(
        "--contract",
        type=Path,
        metavar="FILE",
        help='the new contract as JSON (what ctxemb inspect prints under "contract"), '
        "instead of contract options",
    )
    _contract_args(p)

    from ctxemb_core import _cli_detect, _cli_eval

    _cli_eval.add_parser(sub)
    _cli_detect.add_parser(sub)
    export = _optional_command("export")
    if export is not None:
        export.add_parser(sub)
    static = _optional_command("static")
    if static is not None:
        static.add_parser(sub)
    return parser


def _optional_command(name: str) -> Any:
    """The module of a subcommand that may not be in this installation yet, else ``None``."""
    try:
        return importlib.import_module(f"ctxemb_core._cli_{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"ctxemb_core._cli_{name}":
            raise  # the module is there and broken: a bug to see, not a command to hide
        return None


#: Where a store command looks without --path or --host, and the port of a --host without one.
_DEFAULT_PATH = "./chroma"
_DEFAULT_PORT = 8000
#: The demo's own store, apart from ./chroma so that it never mixes with the user's.
_DEMO_PATH = "./ctxemb-demo-chroma"


def _store_args(p: argparse.ArgumentParser, *, collection_required: bool = True) -> None:
    # --path and --port have no argparse default: _where must see which ones were given.
    p.add_argument("--collection", required=collection_required, help="collection name")
    p.add_argument("--store", default="chroma", choices=STORES, help="the store's adapter")
    p.add_argument("--path", help=f"embedded store folder (default: {_DEFAULT_PATH})")
    p.add_argument("--host", help="a store server's host (instead of --path)")
    p.add_argument(
        "--port", type=_PORT, help=f"the server's port, with --host (default: {_DEFAULT_PORT})"
    )
    p.add_argument(
        "--no-cache", action="store_true", help="do not read or write the embedding cache"
    )


def _open_sample_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sample",
        type=_COUNT,
        default=None,
        help="stored documents re-embedded and compared when an existing collection is opened "
        "(default: the adapter's; 0: stamp and canary only)",
    )


def _rerank_args(p: argparse.ArgumentParser) -> None:
    from ctxemb_core.rerank import Activation

    group = p.add_argument_group(
        "two-stage search",
        "Shortlist --candidates documents with the collection's bi-encoder, then rerank them "
        "and keep --top-k. The reranker's contract fingerprint is printed with the results.",
    )
    group.add_argument(
        "--rerank",
        metavar="MODEL",
        help="a cross-encoder folder or name, a reranker contract JSON file, or 'maxsim' "
        "(late interaction over the collection's own encoder's token vectors)",
    )
    group.add_argument(
        "--candidates",
        type=_POSITIVE,
        default=50,
        help="first-stage candidates to rerank (≥ --top-k)",
    )
    group.add_argument(
        "--activation",
        choices=[a.value for a in Activation],
        help="the cross-encoder's score activation (needed for a plain transformers folder; "
        "a sentence-transformers CrossEncoder folder says its own)",
    )
    group.add_argument(
        "--threshold", type=float, help="keep results whose reranker score is at least this"
    )


def _reranker(args: argparse.Namespace, contract: EmbeddingContract | None) -> Any:
    """The reranker ``--rerank`` names (``maxsim`` over ``contract``'s encoder)."""
    from ctxemb_core.rerank import rerank_contract_for, reranker_for
    from ctxemb_core.rerank.contract import load_reranker_contract

    if args.candidates < args.top_k:
        raise InvalidInputError(
            f"--candidates {args.candidates} is fewer than --top-k {args.top_k}: the reranker "
            "keeps at most the candidates it is given"
        )
    source = args.rerank
    if source == "maxsim":
        assert contract is not None
        found = rerank_contract_for(contract, kind="late_interaction")
    elif source.endswith(".json") and Path(source).is_file():
        found = load_reranker_contract(source)
    else:
        found = rerank_contract_for(source, activation=args.activation)
    if args.activation is not None and found.activation not in (None, args.activation):
        raise InvalidInputError(
            f"--activation {args.activation} differs from the contract's "
            f"{found.activation.value if found.activation else None}"
        )
    return reranker_for(found)


def _open_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    # Only what the user set: the adapter keeps its own default sample.
    return {} if args.sample is None else {"sample": args.sample}


def _adapter_module(store: str) -> Any:
    """The store's adapter module, loaded by name only now."""
    name = f"ctxemb_{store}"
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {store!r} store needs its adapter: pip install 'ctxemb[{store}]' ({exc})"
        ) from None


@contextlib.contextmanager
def _store(args: argparse.Namespace, *, create: bool) -> Iterator[tuple[Any, Any]]:
    """The store's adapter and a client for it, closed when the block ends.

    ``create=False`` (commands that only read) refuses a ``--path`` with no store instead of
    creating an empty one there. A server's client holds sockets until it is closed.
    """
    _where(args)
    adapter = _adapter_module(args.store)
    for option in ("collection", "to"):
        if getattr(args, option, None) is not None:
            adapter.check_name(getattr(args, option))  # before connecting creates a store
    client = adapter.connect(path=args.path, host=args.host, port=args.port, create=create)
    try:
        yield adapter, client
    finally:
        client.close()


def _where(args: argparse.Namespace, default_path: str = _DEFAULT_PATH) -> None:
    """``--path``, ``--host`` and ``--port`` checked together, their defaults filled in.

    A port alone is refused rather than taken to mean a server on 127.0.0.1: without
    ``--host`` the store is the embedded folder, and a server that was meant but is not named
    must not turn into a quiet read of ``./chroma`` (or a write into a new one).
    """
    if args.host is not None and args.path is not None:
        raise InvalidInputError(
            f"--host {args.host} and --path {args.path} name two stores: give --host (and "
            "--port) for a Chroma server, or --path for an embedded folder"
        )
    if args.port is not None and args.host is None:
        raise InvalidInputError(
            f"--port {args.port} needs --host: a port belongs to a server (e.g. --host "
            f"127.0.0.1 --port {args.port}); for an embedded folder give --path alone"
        )
    if args.host is None:
        args.path = default_path if args.path is None else args.path
    elif args.port is None:
        args.port = _DEFAULT_PORT


def _where_flags(args: argparse.Namespace) -> str:
    """The store options that name the store ``args`` point at, as a shell would take them."""
    if args.host is not None:
        return f"--host {shlex.quote(args.host)} --port {args.port}"
    return f"--path {shlex.quote(str(args.path))}"


def _given_contract(args: argparse.Namespace) -> EmbeddingContract | None:
    """The contract that ``--model`` names, resolved before any store is opened."""
    from ctxemb_core.resolve import contract_for

    return contract_for(args.model, **_overrides(args)) if args.model else None


def _caller_contract(
    args: argparse.Namespace, given: EmbeddingContract | None, adapter: Any, client: Any
) -> EmbeddingContract:
    """The contract given on the command line, else the collection's own (with the overrides)."""
    if given is not None:
        return given
    return _changed(adapter.stamped_contract(client, args.collection), _overrides(args))


def _embedder(args: argparse.Namespace, contract: EmbeddingContract) -> Any:
    from ctxemb_core import Embedder
    from ctxemb_core.cache import EmbeddingCache

    return Embedder(contract, cache=None if args.no_cache else EmbeddingCache())


def _load_documents(data: Path) -> dict[str, dict[str, str]]:
    """A JSONL corpus, or a BEIR folder's; refuses a corpus without documents."""
    from ctxemb_core.eval.beir import load_jsonl_corpus

    if data.is_dir():
        # Indexing needs only the corpus: a folder without queries or qrels is fine here.
        found = [data / n for n in ("corpus.jsonl", "corpus.jsonl.gz") if (data / n).is_file()]
        if not found:
            raise DataFormatError(f"{data} holds no corpus.jsonl (or corpus.jsonl.gz)")
        data = found[0]
    return _non_empty(load_jsonl_corpus(data), data)


def _non_empty(corpus: dict[str, dict[str, str]], source: Path) -> dict[str, dict[str, str]]:
    """The corpus, refused if empty or if a text or id is one no tokenizer or store can take.

    Checked whole before the store is opened: found at embedding time, a bad text would leave a
    new, half-written collection behind.
    """
    from ctxemb_core.eval.beir import document_text

    if not corpus:
        raise DataFormatError(
            f"{source} holds no documents; a corpus is one JSON object "
            '{"_id", "title", "text"} per line'
        )
    for doc_id, doc in corpus.items():
        check_text(doc_id, f"{source}: document id {doc_id!r}")
        check_text(document_text(doc), f"{source}: document {doc_id!r}")
    return corpus


def _load_queries(path: Path) -> list[str]:
    """The texts of a JSONL file of ``{"text": ...}`` queries (the demo's)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not valid UTF-8 ({exc.reason})") from None
    queries = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
        except (ValueError, TypeError, KeyError):
            text = None
        if not isinstance(text, str):
            raise DataFormatError(f'{path}:{lineno}: expected a JSON object with a string "text"')
        queries.append(check_text(text, f"{path}:{lineno}: query"))
    if not queries:
        raise DataFormatError(f'{path} holds no queries; write one {{"text": ...}} per line')
    return queries


def _index_missing(
    collection: Any,
    corpus: dict[str, dict[str, str]],
    batch: int,
    *,
    dry_run: bool = False,
    delete_missing: bool = False,
) -> SyncReport:
    """Sync the collection with the corpus: add new ids, re-embed changed texts, leave the
    rest; with ``delete_missing``, then delete the ids the corpus lacks."""
    from tqdm.auto import tqdm

    from ctxemb_core.eval.beir import document_text
    from ctxemb_core.sync import SyncReport

    report = SyncReport(dry_run=dry_run)
    todo = list(corpus)
    # The bar moves per embedded batch of the network, not per write of ``batch`` documents.
    with tqdm(total=len(todo), unit="docs", desc="indexing") as bar:
        for start in range(0, len(todo), batch):
            ids = todo[start : start + batch]
            texts = [document_text(corpus[i]) for i in ids]
            # Upserts only what changed: another process indexing the same corpus meanwhile
            # writes the same records, and a re-run after an interrupt finds them unchanged.
            report += collection.sync(ids, texts, dry_run=dry_run, progress=bar.update)
    if delete_missing:
        # Only once every batch is written: a run that fails part-way deletes nothing.
        report = report.with_deleted(collection.delete_missing(corpus, dry_run=dry_run))
    return report


def _index(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    if args.ray is not None:
        return _index_ray(args)
    corpus = _load_documents(args.data)
    contract = contract_for(args.model, **_overrides(args))
    if args.dry_run and not args.host and args.path and not Path(args.path).exists():
        _print_plan(args, _new_collection_plan(corpus), 0, contract)  # a first index, planned
        return 0
    # The store is reached before the model is loaded: a server that is down is said at once.
    with _store(args, create=not args.dry_run) as (adapter, client):
        if args.dry_run and adapter.stored_or_none(client, args.collection) is None:
            _print_plan(args, _new_collection_plan(corpus), 0, contract)
            return 0
        embedder = _embedder(args, contract)
        collection = adapter.open_collection(
            client, args.collection, embedder, **_open_kwargs(args)
        )
        report = _index_missing(
            collection,
            corpus,
            args.batch_size,
            dry_run=args.dry_run,
            delete_missing=args.delete_missing,
        )
        _print_plan(args, report, collection.count(), contract)
    return 0


def _new_collection_plan(corpus: dict[str, dict[str, str]]) -> SyncReport:
    from ctxemb_core.sync import SyncReport

    return SyncReport(added=tuple(corpus), dry_run=True)


def _print_plan(
    args: argparse.Namespace, report: SyncReport, count: int, contract: EmbeddingContract
) -> None:
    if not report.dry_run:
        print(f"{args.collection}: {report}; {count} documents, contract {contract.describe()}")
        return
    print(
        f"{args.collection} (dry run: nothing embedded or written): would be {report}; "
        f"{count} documents now, contract {contract.describe()}"
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

    from ctxemb_core.resolve import contract_for

    _where(args)
    if args.store != "chroma" or not args.host:
        raise InvalidInputError(
            "--ray writes to a Chroma server every actor can reach: give --host and --port "
            "(and --store chroma)"
        )
    contract = contract_for(args.model, **_overrides(args))
    with tqdm(unit="docs", desc="indexing (ray)", disable=args.dry_run) as bar:
        summary = _adapter_module("chroma").index_with_ray(
            args.data,
            contract,
            collection=args.collection,
            host=args.host,
            port=args.port,
            address=args.ray or None,
            actors=args.actors,
            batch_size=args.batch_size,
            cache=not args.no_cache,
            progress=bar.update,
            delete_missing=args.delete_missing,
            dry_run=args.dry_run,
        )
    done = f"{summary.added} added, {summary.updated} updated, {summary.skipped} unchanged"
    if summary.deleted:
        done += f", {len(summary.deleted)} deleted"
    if summary.dry_run:
        print(
            f"{args.collection} (dry run: nothing embedded or written): would be {done}; "
            f"{summary.count} documents now, contract {contract.describe()}"
        )
        return 0
    print(
        f"{args.collection}: {done}, {summary.failed} failed; {summary.count} documents, "
        f"contract {contract.describe()}"
    )
    for reason, n in summary.reasons.items():
        print(f"  failed {n}: {reason}")
    if summary.failed:
        print("  run the same command again to write the failed documents")
    return 1 if summary.failed else 0


def _query(args: argparse.Namespace) -> int:
    # A command line may carry bytes that are not UTF-8 (decoded as lone surrogates).
    check_texts(args.text, "query text")
    given = _given_contract(args)
    # A reranker that cannot be built is refused before the store is read.
    reranker = _reranker(args, None) if args.rerank not in (None, "maxsim") else None
    with _store(args, create=False) as (adapter, client):
        contract = _caller_contract(args, given, adapter, client)
        collection = adapter.open_collection(
            client, args.collection, contract, create=False, **_open_kwargs(args)
        )
        if args.rerank is not None:
            reranker = reranker or _reranker(args, collection.contract)
            return _two_stage(args, adapter, collection, reranker)
        metric = _metric(collection.contract)
        for q in args.text:
            hits = adapter.shortlist(collection, q, args.top_k, require_text=False).candidates
            if args.json:
                results = [
                    {"id": h.id, "similarity": round(h.score, 6), "text": h.text} for h in hits
                ]
                row = {"query": q, "metric": metric, "results": results}
                print(json.dumps(row, ensure_ascii=False))
                continue
            print(f"query {q!r}  ({metric}, higher is better)")
            for rank, h in enumerate(hits, start=1):
                print(f"  {rank:>2}. {h.id:<20} similarity {h.score:7.4f}  {_clip(h.text, 60)}")
    return 0


def _metric(contract: EmbeddingContract) -> str:
    """What a similarity under ``contract`` is, in words (see ``guard.similarity``)."""
    return "cosine similarity" if contract.normalize else "inner-product similarity"


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _two_stage(args: argparse.Namespace, adapter: Any, collection: Any, reranker: Any) -> int:
    metric = _metric(collection.contract)
    for q in args.text:
        result = adapter.search(
            collection,
            q,
            reranker,
            k=args.candidates,
            n=args.top_k,
            score_threshold=args.threshold,
        )
        if args.json:
            row = {
                "query": q,
                "ids": result.ids,
                "scores": [h.score for h in result.hits],
                "score": "reranker",
                "similarities": [h.first_score for h in result.hits],
                "metric": metric,
                "index_fingerprint": result.index_fingerprint,
                "reranker_fingerprint": result.reranker_fingerprint,
                "rerank_ms": round(result.rerank_seconds * 1000, 2),
            }
            print(json.dumps(row, ensure_ascii=False))
            continue
        print(
            f"query {q!r}  reranked {result.shortlisted} by {reranker.contract.describe()} "
            f"(reranker score, higher is better; first stage: {metric})"
        )
        for rank, h in enumerate(result.hits, start=1):
            print(
                f"  {rank:>2}. {h.id:<20} reranker score {h.score:9.4f}  (first stage "
                f"#{h.first_rank + 1}, similarity {h.first_score:.4f})  {_clip(h.text, 50)}"
            )
    return 0


def _verify(args: argparse.Namespace) -> int:
    given = _given_contract(args)
    with _store(args, create=False) as (adapter, client):
        contract = _caller_contract(args, given, adapter, client)
        stored = adapter.stored_collection(client, args.collection)
        # --all reads every record in pages, a progress bar on stderr (stdout stays the JSON).
        scope = {"all": True, "progress": True} if args.all else {"sample": args.sample}
        report = adapter.verify(stored, contract, **scope)
    print(json.dumps(report.to_dict(), indent=2))
    if report.ok:
        return 0
    print(f"ctxemb: error: verify failed: {_failures(report)}", file=sys.stderr)
    return 1


def _failures(report: Any) -> str:
    """What a failed verify report found, and the next step for each, in one line."""
    found = []
    if not report.stamped:
        found.append("the collection carries no ctxemb stamp (index it through ctxemb)")
    elif report.damaged:
        found.append(f"its stamp is damaged ({report.damaged})")
    elif not report.fingerprint_match:
        fields = ", ".join(c.field for c in report.diff.changes) if report.diff else "?"
        found.append(
            f"the contract differs in {fields} (use the index's own contract, or re-embed "
            "with ctxemb migrate)"
        )
    elif report.canary_cosine is None or report.canary_cosine < report.tolerance:
        found.append(
            f"encoder drift: the canary re-embeds with cosine {report.canary_cosine} < "
            f"{report.tolerance} (check library versions, backend and weights)"
        )
    if report.configuration not in (None, "match"):
        found.append(
            f"the store's embedding setting disagrees with the stamp ({report.configuration})"
        )
    if report.bad_ids:
        shown = ", ".join(report.bad_ids[:3]) + (" …" if len(report.bad_ids) > 3 else "")
        found.append(
            f"{len(report.bad_ids)} of {report.sample_size} checked records carry vectors this "
            f"contract did not make ({shown}; re-embed them through ctxemb)"
        )
    return "; ".join(found) + "; the report on stdout has the details"


def _migrate(args: argparse.Namespace) -> int:
    given = _given_contract(args)
    if args.to == args.collection:
        raise InvalidInputError(
            f"--to {args.to!r} is the source collection; migrate writes a new collection and "
            "never modifies the source: pass another name"
        )
    with _store(args, create=False) as (adapter, client):
        source_contract = adapter.stamped_contract(client, args.collection)
        source = adapter.open_collection(
            client, args.collection, source_contract, create=False, **_open_kwargs(args)
        )
        target = given or _changed(source_contract, _overrides(args))
        embedder = _embedder(args, target)
        done = adapter.migrate(source, embedder, args.to, batch_size=args.batch_size)
        print(f"{args.to}: {done.count()} documents under {target.describe()}")
    print(f"changed: {source_contract.diff(target)}")
    return 0


def _restamp(args: argparse.Namespace) -> int:
    from ctxemb_core.contract import load_contract

    overrides = _overrides(args)
    if args.contract is not None and overrides:
        given = ", ".join(_flag(k) for k in overrides)
        raise InvalidInputError(
            f"--contract and {given} both say what the new contract is: give the file, or "
            "the contract options to change in the stamp's contract"
        )
    new = load_contract(args.contract) if args.contract is not None else None
    if new is None and not overrides:
        raise InvalidInputError(
            "restamp needs the new contract: contract options to change in the stamp's "
            "contract (e.g. --query-prefix 'query: ') or --contract FILE"
        )
    with _store(args, create=False) as (adapter, client):
        old = adapter.stamped_contract(client, args.collection)
        new = new or _changed(old, overrides)
        report = adapter.restamp(client, args.collection, new)
    if not report.changed:
        print(f"{args.collection}: unchanged, fingerprint {report.old_fingerprint[:12]}")
        return 0
    print(
        f"{args.collection}: {report.old_fingerprint[:12]} -> {report.new_fingerprint[:12]} "
        f"({report.kind.value})"
    )
    for change in report.changes:
        print(f"  {change.field}: {change.index!r} -> {change.caller!r}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ctxemb_core._cli_eval import run

    return run(args)


def _detect(args: argparse.Namespace) -> int:
    from ctxemb_core._cli_detect import run

    return run(args)


def _inspect(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    contract = contract_for(args.model, **_overrides(args))
    out = {"fingerprint": contract.fingerprint, "contract": contract.to_dict()}
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ctxemb_core import contract_for

    corpus = _load_documents(args.corpus)
    queries = _load_queries(args.queries)
    contract = contract_for(args.model)
    _where(args, default_path=_DEMO_PATH)
    with _store(args, create=True) as (adapter, client):
        return _demo_in(args, adapter, client, contract, corpus, queries)


def _demo_in(
    args: argparse.Namespace,
    adapter: Any,
    client: Any,
    contract: EmbeddingContract,
    corpus: dict[str, dict[str, str]],
    queries: list[str],
) -> int:
    from ctxemb_core import Embedder
    from ctxemb_core.errors import ContractMismatchError

    print(f"contract   {contract.describe()}")
    collection = adapter.open_collection(client, args.collection, Embedder(contract))
    added = len(_index_missing(collection, corpus, 512).added)
    print(
        f"collection {args.collection!r} in {args.path or f'{args.host}:{args.port}'}: "
        f"{added} documents added, {collection.count()} in all, stamped {contract.fingerprint[:12]}"
    )
    print(f"scores     {_metric(contract)} of each hit, higher is better")
    for q in queries:
        found = adapter.shortlist(collection, q, args.top_k, require_text=False).candidates
        hits = ", ".join(f"{h.id} ({h.score:.3f})" for h in found)
        print(f"query      {q!r}\n  -> {hits}")

    print("\nThe same collection opened under other contracts:")
    for label, other in (
        ("CLS pooling instead of mean", contract.with_(pooling="cls")),
        ("normalisation switched off", contract.with_(normalize=False)),
        ("an E5-style query prefix added", contract.with_(query_prefix="query: ")),
    ):
        try:
            adapter.open_collection(client, args.collection, Embedder(other), create=False)
        except ContractMismatchError as exc:
            print(f"- {label}: refused ({exc.diff.kind.value}), fields {', '.join(exc.fields)}")
            print("  " + _cli_message(exc).replace("\n", "\n  "))
        else:  # pragma: no cover - the guard failing is the one thing the demo must not show
            print(f"- {label}: NOT refused")
            return 1
    # The store options spelled out: the other commands' default store is ./chroma, not this.
    where = f"--collection {shlex.quote(args.collection)} {_where_flags(args)}"
    print("\nQuery the demo collection yourself, or check it:")
    print(f"  ctxemb query {shlex.quote(queries[0] if queries else 'green tea')} {where}")
    print(f"  ctxemb verify {where}")
    return 0


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "inspect": _inspect,
    "demo": _demo,
    "index": _index,
    "query": _query,
    "verify": _verify,
    "migrate": _migrate,
    "eval": _eval,
    "detect": _detect,
    "restamp": _restamp,
}


def _error(message: str) -> int:
    """Print one ``ctxemb: error:`` line (a multi-line message joined) and return exit code 2."""
    parts = [part.strip() for part in message.splitlines() if part.strip()]
    line = parts[0] if parts else "unknown error"
    for part in parts[1:]:
        line += (" " if line.endswith((".", ":", ";")) else "; ") + part
    print(f"ctxemb: error: {line}", file=sys.stderr)
    return 2


def _cli_message(exc: CtxembError) -> str:
    """The error's message in the command line's terms (flags, not Python calls)."""
    message_for = getattr(exc, "message_for", None)
    return str(message_for("cli")) if callable(message_for) else str(exc)


class _Truncations:
    """Every :class:`TruncationWarning` of a command, said once at its end.

    An embedder warns once per call, and a command makes many calls (one per batch); the user
    needs the total, in one line and without the warning's source line.
    """

    def __init__(self) -> None:
        self.seen: list[TruncationWarning] = []

    @contextlib.contextmanager
    def recorded(self) -> Iterator[None]:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.simplefilter("always", TruncationWarning)  # every call counts, none shown
            show = warnings.showwarning

            def record(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
                if isinstance(message, TruncationWarning):
                    self.seen.append(message)
                else:
                    show(message, category, *args, **kwargs)

            warnings.showwarning = record
            yield

    def notes(self) -> list[str]:
        # Only calls that cut something warn, so the texts embedded in all are not known here:
        # the note counts what was cut, never "of N".
        by_limit: dict[int, int] = {}
        for w in self.seen:
            by_limit[w.max_tokens] = by_limit.get(w.max_tokens, 0) + w.count
        return [
            f"ctxemb: note: {count:,} text{'s were' if count != 1 else ' was'} longer than "
            f"max_tokens={limit} and {'were' if count != 1 else 'was'} truncated as the "
            "contract says (chunk long texts if their ends matter)"
            for limit, count in sorted(by_limit.items())
        ]


def _run(args: argparse.Namespace) -> int:
    handler = _HANDLERS.get(args.command)
    if handler is None:  # a command of its own module (export)
        handler = _optional_command(args.command).run
    truncations = _Truncations()
    with truncations.recorded():
        code = handler(args)
    for note in truncations.notes():
        print(note, file=sys.stderr)
    return code


@contextlib.contextmanager
def _progress_lines() -> Iterator[None]:
    """One-time slow work (the ONNX export) said on stderr while a command runs; a library
    call says it only to a caller that asks for the progress logger's INFO records."""
    import logging

    from ctxemb_core._batches import PROGRESS_LOGGER

    logger = logging.getLogger(PROGRESS_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def _quiet_stdout() -> None:
    """After a reader closed stdout (``| head``): send what is left to /dev/null, so that
    Python's own flush at exit does not fail again (the recipe of Python's signal docs)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctxemb`` console script.

    Returns:
        0 on success, 1 when a check fails (``verify``, ``detect``), 2 for a user's mistake
        (one ``ctxemb: error:`` line on stderr, nothing changed), 130 when interrupted.
    """
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit as exc:  # --help: argparse printed it and asks to exit
            return exc.code if isinstance(exc.code, int) else 0
        with _progress_lines():
            code = _run(args)
        sys.stdout.flush()  # a closed pipe is found here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        # The reader has what it wanted (ctxemb inspect ... | head -1): stop quietly.
        _quiet_stdout()
        return 0
    except CtxembError as exc:
        return _error(f"{type(exc).__name__}: {_cli_message(exc)}")
    except OSError as exc:
        # A user's path (a corpus, a queries file, a store folder) that cannot be read or written;
        # errors from ctxemb's own files are CtxembErrors and are caught above.
        return _error(f"{type(exc).__name__}: {exc}; check the path and its permissions")
    except KeyboardInterrupt:
        print(
            "ctxemb: error: interrupted; index, migrate and eval continue where they stopped "
            "when run again",
            file=sys.stderr,
        )
        return INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
