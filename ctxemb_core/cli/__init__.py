"""The ``ctxemb`` command: one module per command group (``index``, ``query``, ``verify``, ...),
sharing :mod:`~ctxemb_core.cli.common` (the parser, contract options, errors) and
:mod:`~ctxemb_core.cli.stores` (a store's options, which come from its adapter).

Store adapters (Chroma, …) are reached by name (:data:`STORES`) and loaded only when a parser is
built or a store opened, so this package imports no integration at module level, and a store
whose adapter is not installed leaves every other command working.

A user's mistake never ends in a traceback: every one is a :class:`CtxembError` (argparse's own
usage errors included, a mistyped option named with the nearest one), printed as one ``ctxemb:
error:`` line on stderr whose advice names only what the command that was run can do: its own
options, its collection and store, or the command that takes the next step
(:mod:`~ctxemb_core.cli.advice` words the error's remedies), and is found before the store is
touched wherever the inputs allow it. Commands that only read a store never create one. Texts cut to
the contract's ``max_tokens`` are summed up in one ``ctxemb: note:`` line at the end. Anything
else is a bug and keeps its traceback.

Exit codes:
    0    success (also when the reader of stdout stops early, as ``| head`` does)
    1    a check failed: ``verify`` found a failed check, ``detect`` no conclusive match,
         ``index --ray`` left documents unwritten (named; run it again)
    2    bad input: one ``ctxemb: error:`` line on stderr, nothing changed
    130  interrupted (Ctrl-C): the error line says what the command left; index, migrate and
         eval continue where they stopped
"""

from __future__ import annotations

# _parser and _error: the names callers used when the CLI was one module (ctxemb_core/cli.py).
from ctxemb_core.cli.app import build_parser as _parser  # noqa: F401
from ctxemb_core.cli.app import main
from ctxemb_core.cli.common import DEFAULT_MODEL, INTERRUPTED, contract_parameters
from ctxemb_core.cli.common import error as _error  # noqa: F401
from ctxemb_core.cli.stores import STORES

__all__ = ["DEFAULT_MODEL", "INTERRUPTED", "STORES", "contract_parameters", "main"]
