"""The ``ctxemb`` parser, built from each command's module, and :func:`main`, which runs one.

A command module gives ``add_parser(sub)`` (its subcommand, options and help) and
``run(args) -> int`` (the exit code); this module is the only one that knows them all.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ctxemb_core.cli import (
    alias,
    demo,
    detect,
    export,
    index,
    inspect,
    migrate,
    query,
    restamp,
    serve,
    static,
    upgrade,
    verify,
)
from ctxemb_core.cli import eval as evaluate
from ctxemb_core.cli.advice import ARGV, PARSER, Invocation, cli_message
from ctxemb_core.cli.common import EXIT_CODES, INTERRUPTED, Parser, error, examples
from ctxemb_core.cli.stores import options_only_for
from ctxemb_core.errors import CtxembError, TruncationWarning
from ctxemb_core.redact import scrub, secrets_in

#: The subcommands in the order ``ctxemb --help`` lists them.
COMMANDS = {
    "inspect": inspect,
    "demo": demo,
    "index": index,
    "query": query,
    "verify": verify,
    "migrate": migrate,
    "restamp": restamp,
    "alias": alias,
    "upgrade": upgrade,
    "eval": evaluate,
    "detect": detect,
    "export": export,
    "static": static,
    "serve": serve,
}
_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: module.run for name, module in COMMANDS.items()
}


def build_parser() -> argparse.ArgumentParser:
    """The ``ctxemb`` parser with every subcommand."""
    parser = Parser(
        prog="ctxemb",
        description="Contract-aware embeddings: pin the recipe, stamp the index, refuse mixes. "
        "Run ctxemb COMMAND --help for each command's options, defaults and an example.",
        epilog=examples(
            "ctxemb demo",
            "ctxemb index corpus.jsonl --collection docs --path ./chroma",
            "ctxemb query 'how do I keep slugs off lettuce' --collection docs --path ./chroma",
        )
        + "\n\n"
        + EXIT_CODES,
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
    for module in COMMANDS.values():
        module.add_parser(sub)
    for command in sub.choices.values():
        # An error's advice names the options of the command that was run (cli.advice).
        command.set_defaults(**{PARSER: command})
    return parser


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
    handler = _HANDLERS[args.command]
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


def _error(message: str, argv: Sequence[str]) -> int:
    """:func:`error`, with every password the command line or the environment holds masked
    (the messages never quote one; this covers text a driver wrote)."""
    return error(scrub(message, secrets_in(*argv, os.environ.get("CTXEMB_PG_DSN"))))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctxemb`` console script.

    Returns:
        0 on success, 1 when a check fails (``verify``, ``detect``), 2 for a user's mistake
        (one ``ctxemb: error:`` line on stderr, nothing changed), 130 when interrupted.
    """
    given = sys.argv[1:] if argv is None else list(argv)
    args: argparse.Namespace | None = None
    # The command argparse will run: the first word that is not an option (the top level takes
    # none with a value); only its parser needs the options of a store.
    command = next((a for a in given if not a.startswith("-")), None)
    try:
        try:
            with options_only_for(f"ctxemb {command}"):
                parser = build_parser()
            args = parser.parse_args(given)
            setattr(args, ARGV, tuple(given))
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
        run = Invocation.of(args) if args is not None else None
        return _error(f"{type(exc).__name__}: {cli_message(exc, run)}", given)
    except OSError as exc:
        # A user's path (a corpus, a queries file, a store folder) that cannot be read or written;
        # errors from ctxemb's own files are CtxembErrors and are caught above.
        return _error(f"{type(exc).__name__}: {exc}; check the path and its permissions", given)
    except KeyboardInterrupt:
        module = COMMANDS.get(args.command) if args is not None else None
        after = getattr(module, "AFTER_INTERRUPT", "run the same command again")
        # A command whose advice depends on what was asked (upgrade --rollback) words its own.
        after_interrupt = getattr(module, "after_interrupt", None)
        if after_interrupt is not None and args is not None:
            after = after_interrupt(args)
        print(f"ctxemb: error: interrupted; {after}", file=sys.stderr)
        return INTERRUPTED
