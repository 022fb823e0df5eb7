"""What every ``ctxemb`` command shares: the parser and its help, the contract options, integer
options, reading a corpus, and how an error is printed.

Commands import this module (and :mod:`ctxemb_core.cli.stores` for a store's options), never
each other: a helper two commands need lives here.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import textwrap
import typing
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.errors import (
    CtxembError,
    DataFormatError,
    InvalidInputError,
    MissingDependencyError,
)
from ctxemb_core.validate import check_text

if TYPE_CHECKING:
    from ctxemb_core.sync import SyncReport

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
INTERRUPTED = 130  # the shell's code for a process ended by SIGINT

EXIT_CODES = """\
exit codes:
  0    success
  1    a check failed (verify: a failed check; detect: no conclusive match;
       index --ray: documents left unwritten, run it again)
  2    bad input: one "ctxemb: error:" line on stderr, nothing changed
  130  interrupted (Ctrl-C); index, migrate and eval continue where they stopped"""


class HelpFormatter(argparse.HelpFormatter):
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


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are :class:`InvalidInputError` naming the argument.

    argparse would print the usage and exit; raising instead lets :func:`main` report every user
    mistake the same way (one line, exit 2) and lets in-process callers catch it. Every parser
    (subcommands' too, which argparse builds with the parent's class) shows defaults in its help.

    A command whose options could not all be built (a store's adapter is not installed) keeps
    the reason in :attr:`unavailable` and raises it when the command is chosen, its ``--help``
    included; the other commands, and ``ctxemb --help``, work as ever.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.unavailable: CtxembError | None = None
        #: Options of a store whose adapter is not installed, each with the error that says so.
        self.absent_options: dict[str, CtxembError] = {}

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.unavailable is not None:
            raise self.unavailable
        given = list(sys.argv[1:] if args is None else args)
        try:
            found, extra = super().parse_known_args(given, namespace)
        except InvalidInputError:
            # A mistyped option leaves a required one missing (--colection for --collection):
            # the option the user typed is the mistake to name, not the one argparse missed.
            unknown = self._unknown(given)
            if unknown:
                raise self._unrecognized(unknown) from None
            raise
        if extra and self._subparsers is None:  # a command's own parser: nothing is left over
            raise self._unrecognized(extra)
        return found, extra

    def _unknown(self, given: list[str]) -> list[str]:
        """What argparse would leave over from ``given`` with no argument required (``[]``
        when that parse fails too: the first error stands)."""
        required = [(a, a.required) for a in self._actions]
        for action, _ in required:
            action.required = False
        try:
            return super().parse_known_args(given, None)[1]
        except (InvalidInputError, SystemExit):
            return []
        finally:
            for action, was in required:
                action.required = was

    def _unrecognized(self, extra: list[str]) -> CtxembError:
        """The arguments nothing took, the nearest option named for a mistyped one (an option
        of a store whose adapter is not installed: that store's install)."""
        import difflib

        options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        typed = next((e.split("=", 1)[0] for e in extra if e.startswith("--")), None)
        if typed in self.absent_options:
            return self.absent_options[typed]
        near = difflib.get_close_matches(typed, options, n=1, cutoff=0.6) if typed else []
        hint = f"; did you mean {near[0]}?" if near else ""
        return InvalidInputError(
            f"{self.prog}: unrecognized arguments: {' '.join(extra)}{hint} (see {self.prog} --help)"
        )

    def error(self, message: str) -> NoReturn:
        raise InvalidInputError(f"{self.prog}: {message} (see {self.prog} --help)")


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
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


POSITIVE = int_at_least(1)
COUNT = int_at_least(0)
PORT = int_at_least(1, 65535)


def examples(*lines: str) -> str:
    """An epilog of example command lines, kept as written by :class:`HelpFormatter`."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


# -- the contract options ------------------------------------------------------------------------

# The contract flags are contract_for's keyword-only parameters, one flag each, typed and with
# choices from their annotations (enums) or the presets; this is only their help in CLI words.
CONTRACT_HELP = {
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


def contract_file(path: Path) -> EmbeddingContract:
    """The contract a file holds: a contract's JSON (``contract.to_json()``), or what ``ctxemb
    inspect`` prints (``{"fingerprint": ..., "contract": {...}}``, whose fingerprint must be
    its contract's).

    Raises:
        DataFormatError: neither, or a fingerprint that is not the contract's.
    """
    import json

    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not (isinstance(data, dict) and set(data) == {"fingerprint", "contract"}):
        return EmbeddingContract.from_json(text)  # says what is wrong with it
    contract = EmbeddingContract.from_dict(data["contract"])
    named = data["fingerprint"]
    if not (isinstance(named, str) and same_contract(contract, named, exact=True)):
        raise DataFormatError(
            f"{path}: its fingerprint {str(named)[:12]!r} is not its contract's "
            f"({contract.fingerprint[:12]}): the contract was edited; print it again with "
            "ctxemb inspect"
        )
    return contract


def flag(name: str) -> str:
    """The command-line spelling of a parameter: ``truncate_dim`` -> ``--truncate-dim``."""
    return "--" + name.replace("_", "-")


def contract_args(p: argparse.ArgumentParser) -> None:
    """Add the group of contract options, one per :func:`contract_parameters` name."""
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
        options: dict[str, Any] = {"help": CONTRACT_HELP.get(name, name.replace("_", " "))}
        if bool in kinds:
            options.update(action=argparse.BooleanOptionalAction, default=None)
        elif enum is not None or name == "family":
            # Values are checked by argparse against the enum (or the presets) itself; a wrong
            # one is refused with the valid ones listed.
            choices = list(FAMILY_PRESETS) if enum is None else [e.value for e in enum]
            options.update(choices=choices, metavar=name.upper())
        elif int in kinds:
            options.update(type=int, metavar="N")
        group.add_argument(flag(name), **options)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The contract options the user gave (``None``: not given)."""
    return {
        k: getattr(args, k) for k in contract_parameters() if getattr(args, k, None) is not None
    }


def changed(stamped: EmbeddingContract, overrides: dict[str, Any]) -> EmbeddingContract:
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


def given_contract(args: argparse.Namespace) -> EmbeddingContract | None:
    """The contract that ``--model`` names, resolved before any store is opened."""
    from ctxemb_core.resolve import contract_for

    return contract_for(args.model, **overrides(args)) if args.model else None


def caller_contract(
    args: argparse.Namespace, given: EmbeddingContract | None, adapter: Any, client: Any
) -> EmbeddingContract:
    """The contract given on the command line, else the collection's own (with the overrides)."""
    if given is not None:
        return given
    return changed(adapter.stamped_contract(client, args.collection), overrides(args))


def embedder(args: argparse.Namespace, contract: EmbeddingContract) -> Any:
    """The contract's Embedder, with the embedding cache unless ``--no-cache``; with ``--url``,
    one that embeds through that server (held to the contract by its fingerprint and canary)."""
    from ctxemb_core.cache import EmbeddingCache
    from ctxemb_core.embedder import Embedder

    cache = None if args.no_cache else EmbeddingCache()
    return Embedder(contract, cache=cache, **remote_options(args))


def remote_args(p: argparse.ArgumentParser) -> None:
    """``--url``, ``--api`` and ``--api-key-env``: embed through a server, not a local model."""
    group = p.add_argument_group(
        "embedding server",
        "Embed through a server instead of loading the model here. ctxemb serve is checked by "
        "its contract's fingerprint and its canary; another OpenAI-compatible server (--api "
        "openai) by the canary alone, made here from the contract's model folder. A server "
        "that fails the check is refused before a vector is used.",
    )
    group.add_argument(
        "--url",
        metavar="URL",
        help="the server's base URL, http://host:port[/v1] (/embeddings is appended, as the "
        "openai client does; without --model: the contract ctxemb serve serves)",
    )
    group.add_argument(
        "--api", choices=["ctxemb", "openai"], default="ctxemb", help="the server's protocol"
    )
    group.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="the environment variable that holds the server's API key",
    )
    group.add_argument(
        "--served-model",
        metavar="ID",
        help="the model id the server answers to, where it is not the contract's model name "
        "(a server started with --served-model-name)",
    )


def remote_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Embedder keywords ``--url``, ``--api``, ``--api-key-env`` and ``--served-model`` set
    (none without ``--url``)."""
    url = getattr(args, "url", None)
    served = getattr(args, "served_model", None)
    if url is None:
        for option, value in (
            ("--api-key-env", getattr(args, "api_key_env", None)),
            ("--served-model", served),
        ):
            if value is not None:
                raise InvalidInputError(f"{option} is for a server: give its --url")
        return {}
    options = {"url": url, "api": args.api, "api_key_env": args.api_key_env}
    return options if served is None else {**options, "served_model": served}


def model_or_server(args: argparse.Namespace) -> str:
    """What ``--model`` names; without it, the server of ``--url`` (its contract), else the
    bundled model."""
    if args.model is not None:
        return str(args.model)
    if getattr(args, "url", None) is not None and getattr(args, "api", "ctxemb") == "ctxemb":
        return str(args.url)
    return DEFAULT_MODEL


def command_contract(args: argparse.Namespace) -> EmbeddingContract:
    """The contract of a command that embeds under ``--model``'s (with the contract options)
    or, with ``--url`` and no ``--model``, the server's: on a server of several contracts,
    that of the model ``--served-model`` names (it has no one contract of its own)."""
    from ctxemb_core.resolve import contract_for

    source = model_or_server(args)
    given = overrides(args)
    served = getattr(args, "served_model", None)
    if args.model is None and source == getattr(args, "url", None) and served and not given:
        from ctxemb_core.remote import server_contract

        return server_contract(source, model=served).contract
    # Contract options with a server's URL are refused there, naming what to do.
    return contract_for(source, **given)


def open_sample_arg(p: argparse.ArgumentParser) -> None:
    """``--sample``: what opening an existing collection re-checks (see :func:`open_kwargs`)."""
    p.add_argument(
        "--sample",
        type=COUNT,
        default=None,
        help="stored documents re-embedded and compared when an existing collection is opened "
        "(default: the adapter's; 0: stamp and canary only)",
    )


def open_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of an adapter's ``open_collection`` that ``--sample`` sets."""
    # Only what the user set: the adapter keeps its own default sample.
    return {} if args.sample is None else {"sample": args.sample}


# -- corpora -------------------------------------------------------------------------------------


def load_documents(data: Path) -> dict[str, dict[str, str]]:
    """A JSONL corpus, or a BEIR folder's; refuses a corpus without documents."""
    from ctxemb_core.eval.beir import load_jsonl_corpus

    if data.is_dir():
        # Indexing needs only the corpus: a folder without queries or qrels is fine here.
        found = [data / n for n in ("corpus.jsonl", "corpus.jsonl.gz") if (data / n).is_file()]
        if not found:
            raise DataFormatError(f"{data} holds no corpus.jsonl (or corpus.jsonl.gz)")
        data = found[0]
    return non_empty(load_jsonl_corpus(data), data)


def non_empty(corpus: dict[str, dict[str, str]], source: Path) -> dict[str, dict[str, str]]:
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


def index_corpus(
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


# -- output --------------------------------------------------------------------------------------


def metric(contract: EmbeddingContract) -> str:
    """What a similarity under ``contract`` is, in words (see ``guard.similarity``)."""
    return "cosine similarity" if contract.normalize else "inner-product similarity"


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def file_size(n: int) -> str:
    """A file size in bytes, in the unit that keeps it short (``12.3 MB``)."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def error(message: str) -> int:
    """Print one ``ctxemb: error:`` line (a multi-line message joined) and return exit code 2."""
    parts = [part.strip() for part in message.splitlines() if part.strip()]
    line = parts[0] if parts else "unknown error"
    for part in parts[1:]:
        line += (" " if line.endswith((".", ":", ";")) else "; ") + part
    print(f"ctxemb: error: {line}", file=sys.stderr)
    return 2


def cli_message(exc: CtxembError) -> str:
    """The error's message in the command line's terms (flags, not Python calls)."""
    message_for = getattr(exc, "message_for", None)
    return str(message_for("cli")) if callable(message_for) else str(exc)


def ray_integration() -> Any:
    """``ctxemb_ray``, loaded by name as the stores' adapters are: core imports no integration
    (and no Ray, which ``ctxemb_ray`` loads only when a job runs)."""
    try:
        return importlib.import_module("ctxemb_ray")
    except ImportError as exc:
        raise MissingDependencyError(
            f"--ray needs the Ray integration (ctxemb_ray): pip install 'ctxemb[ray]' ({exc})"
        ) from None
