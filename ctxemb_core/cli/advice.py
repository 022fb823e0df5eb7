"""An error's advice in the words of the ``ctxemb`` command that was run.

An error carries its next steps as data (:class:`~ctxemb_core.remedy.Remedy`); this module words
them for one command line (:class:`Invocation`): the options that command has, the ones the user
gave, the collection and store it named. A step the command cannot take is said with the command
that can (``ctxemb restamp ...``, ``ctxemb migrate ...``), spelled with the user's collection and
store options; an option the command does not have is never suggested, and nothing in it is
Python. Errors whose advice is not data yet are shown as :meth:`CtxembError.message_for` gives
them.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxemb_core.cli.common import contract_parameters, flag
from ctxemb_core.errors import CtxembError, InvalidContractError
from ctxemb_core.remedy import (
    DEFAULT_TERMS,
    GIVE_CONTROLS,
    REPAIR_SETTING_CLI,
    Remedy,
    Step,
    StoreTerms,
    served_models,
)

__all__ = ["PARSER", "Invocation", "cli_message", "shell_word", "word"]

#: The namespace attributes where each command's parser leaves itself, and ``main`` the
#: command line as given (see :meth:`Invocation.of`).
PARSER = "_ctxemb_parser"
ARGV = "_ctxemb_argv"

#: Commands whose contract is the collection's own unless --model or a contract option is given.
_READS_STAMP = frozenset({"query", "verify"})
#: Commands whose contract is the server's when --url is given without --model.
_SERVER_DEFAULT = frozenset({"index", "eval"})
#: Contract fields that no option sets by itself (they follow from the model's folder).
_FROM_FOLDER = frozenset({"weights", "dimension", "schema"})


@dataclass(frozen=True)
class Invocation:
    """One run of a ``ctxemb`` command: what its advice may name.

    Attributes:
        command: the subcommand (``"query"``).
        parser: its parser (the options it has).
        args: the parsed arguments (the store options' defaults filled in as the run went).
        argv: the command line as typed (what the user gave, before any default was filled).
        shown: the error is shown as an example (the demo's refusals), not met by the user:
            its caller's contract is not the one the command line chose.
    """

    command: str
    parser: argparse.ArgumentParser
    args: argparse.Namespace
    argv: tuple[str, ...] = ()
    shown: bool = False

    @classmethod
    def of(cls, args: argparse.Namespace) -> Invocation | None:
        """The invocation ``args`` were parsed for (``None``: not by a command's parser)."""
        parser = getattr(args, PARSER, None)
        command = getattr(args, "command", None)
        argv = tuple(getattr(args, ARGV, ()))
        return cls(command, parser, args, argv) if parser is not None and command else None

    def action(self, dest: str) -> argparse.Action | None:
        """The command's option or argument that sets ``dest``, or ``None``."""
        return next((a for a in self.parser._actions if a.dest == dest), None)

    def has(self, dest: str) -> bool:
        return self.action(dest) is not None

    def given(self, dest: str) -> bool:
        """Whether the command line gave ``dest``'s option (abbreviated, or ``--x=v``, too)."""
        action = self.action(dest)
        if action is None or not action.option_strings:
            return action is not None
        options = [o for a in self.parser._actions for o in a.option_strings]
        for token in self.argv:
            if not token.startswith("-"):
                continue
            typed = token.split("=", 1)[0]
            if typed in action.option_strings:
                return True
            if typed.startswith("--") and typed not in options:
                meant = [o for o in options if o.startswith(typed)]
                if len(meant) == 1 and meant[0] in action.option_strings:
                    return True
        return False

    def typed(self, dest: str) -> str:
        """How the user gave ``dest``: ``--no-normalize``, ``--model``."""
        action = self.action(dest)
        assert action is not None
        if isinstance(action, argparse.BooleanOptionalAction):
            value = getattr(self.args, dest, None)
            return next(o for o in action.option_strings if o.startswith("--no-") != bool(value))
        return action.option_strings[0] if action.option_strings else str(action.metavar or dest)

    def spell(self, dest: str, value: Any) -> str | None:
        """``dest`` set to ``value`` on this command's line, or ``None`` where it has no way."""
        action = self.action(dest)
        if action is None:
            return None
        if not action.option_strings:  # a positional: the command line with it
            return self.again(dest, value)
        return _option(action.option_strings[0], value, action)

    def again(self, dest: str, value: Any) -> str:
        """The command line as the user typed it, with ``dest`` set to ``value`` instead."""
        action = self.action(dest)
        words = list(self.argv) or [self.command]
        if action is not None and not action.option_strings:
            old = str(getattr(self.args, dest, ""))
            if old in words:
                words[words.index(old)] = str(value)
                return "ctxemb " + " ".join(shell_word(w) for w in words)
        option = action.option_strings[-1] if action is not None else flag(dest)
        kept, skip = [], False
        names = action.option_strings if action is not None else [option]
        for word in words:
            if skip:
                skip = False
                continue
            if word in names:
                skip = action is None or action.nargs != 0
                continue
            if any(word.startswith(n + "=") for n in names):
                continue
            kept.append(word)
        return "ctxemb " + " ".join(
            [*(shell_word(w) for w in kept), _option(option, value, action)]
        )

    @property
    def collection(self) -> str:
        name = getattr(self.args, "collection", None)
        return shell_word(name) if name and self.has("collection") else "<name>"

    def store(self, terms: StoreTerms) -> str:
        """The store options that reach the store the command used (as it would take them)."""
        from ctxemb_core.cli.stores import choose_store, store_options

        demo = self.command == "demo"
        with contextlib.suppress(CtxembError, AttributeError, KeyError):
            if self.command == "eval":  # the store its --via path used (none: in memory)
                from ctxemb_core.eval.paths import via_store

                self.args.store = via_store(self.args.via)
            elif not demo:
                choose_store(self.args)
            options = store_options(self.args.store)
            options.check_arguments(self.args, demo=demo)
            return str(options.flags(self.args))
        return f"(with {terms.cli_where})"

    def target(self, terms: StoreTerms) -> str:
        """``<store options> --collection NAME``: the collection this command used."""
        return f"{self.store(terms)} --collection {self.collection}"

    def contract_given(self) -> list[str]:
        """The options the user gave that choose the contract, as typed."""
        dests = ("model", *contract_parameters())
        return [self.typed(d) for d in dests if self.given(d)]


def shell_word(value: Any) -> str:
    """``value`` as one word of a command line to paste (a ``<placeholder>`` as it is)."""
    text = str(getattr(value, "value", value))
    return text if text.startswith("<") and text.endswith(">") else shlex.quote(text)


def _option(option: str, value: Any, action: argparse.Action | None = None) -> str:
    if isinstance(value, bool) or isinstance(action, argparse.BooleanOptionalAction):
        return option if value else "--no-" + option.removeprefix("--")
    return f"{option} {shell_word(value)}"


#: The option (its dest) that sets a contract field, where the two names differ.
_PARAMS = {"query_model": "query_encoder"}


def _contract_options(
    values: Sequence[tuple[str, Any]], takes: Callable[[str], bool]
) -> tuple[list[str], list[str]]:
    """Contract fields set to ``values`` as options of a command (``takes``: whether it has
    the option): (the options, the fields no option of it sets)."""
    options, left = [], []
    names = set(contract_parameters())
    if any(field == "model" for field, _ in values):  # the model's folder gives these
        values = [(f, v) for f, v in values if f not in _FROM_FOLDER]
    for field, value in values:
        param = _PARAMS.get(field, field)
        if field == "model":
            param = "model" if takes("model") else "name"
        if field in _FROM_FOLDER or value is None or not (param in names or takes(param)):
            left.append(field)
            continue
        options.append(_option(flag(param), value))
    return options, left


def _restamp_takes(dest: str) -> bool:
    return dest in contract_parameters()


def _migrate_takes(dest: str) -> bool:
    return dest == "model" or dest in contract_parameters()


def _contract_values(r: Remedy, run: Invocation | None = None) -> list[tuple[str, Any]]:
    """The remedy's values of the differing fields; the caller's model as the user typed it
    (a folder, where the contract records its name)."""
    typed = getattr(run.args, "model", None) if run is not None and run.given("model") else None
    return [
        (k, typed if k == "model" and isinstance(typed, str) else v)
        for k, v in r.values
        if k in r.fields
    ]


def _sentences(clauses: list[str]) -> str:
    clauses = [c for c in clauses if c]
    if not clauses:
        return ""
    text = ", or ".join(clauses)
    return text[0].upper() + text[1:] + "."


def word(remedies: Sequence[Remedy], terms: StoreTerms | None, run: Invocation) -> str:
    """The remedies as advice for the command ``run``: only what can be run from there."""
    t = terms or DEFAULT_TERMS
    c = run.command
    by = {r.step: r for r in remedies}
    if Step.REPAIR in by or Step.VERIFY_ALL in by:
        target = run.target(t)
        return (
            f"Rebuild it from the stored texts into a new collection: ctxemb migrate {target} "
            f"--to <new name> --sample 0; ctxemb verify {target} --all lists every such record."
        )
    if Step.REPAIR_SETTING in by:
        return REPAIR_SETTING_CLI
    if Step.REFRESH in by or Step.REBUILD_LEXICAL in by or Step.SET_FUSION in by:
        return _hybrid(by, t, run)
    if Step.ADOPT in by:
        name = by[Step.ADOPT].get("name")
        models = getattr(run.args, "model", None) if c == "detect" else None
        model = (
            " ".join(f"--model {shell_word(m)}" for m in models) if models else "--model <model>"
        )
        where = run.store(t)
        named = shell_word(name) if name else run.collection
        return (
            f"Find its contract and stamp it: ctxemb detect {where} --collection {named} {model} "
            f"--adopt; the {t.kind} is stamped only if a sample of its {t.records} re-embeds to "
            "their stored vectors."
        )
    if Step.USE_FOLDER in by:
        folder = by[Step.READ_FOLDER].get("folder") if Step.READ_FOLDER in by else None
        that = run.spell("model", "<the folder the contract was read from>")
        this = run.spell("model", folder) if folder else None
        text = f"Pass the folder the contract was read from: {that}." if that else ""
        if this:
            text += (
                f" To use this folder's model instead (another contract: an index written under "
                f"the old one refuses it, and ctxemb migrate re-embeds it): {this}."
            )
        return text.strip()
    if Step.SERVE in by:
        return _server(by, t, run)
    if Step.GIVE in by:
        return " ".join(_give(r, run) for r in remedies if r.step is Step.GIVE).strip()
    clauses = []
    for r in remedies:
        if r.step is Step.USE_INDEX_CONTRACT:
            clauses.append(_use_index(r, run))
        elif r.step is Step.NAME_MODEL and run.has("name"):
            model = shell_word(r.get("model"))
            both = " with --model" if run.given("model") else ""
            clauses.append(f"pass --name {model}{both}")
        elif r.step is Step.RESTAMP:
            options, left = _contract_options(_contract_values(r), _restamp_takes)
            change = " ".join(options) if options and not left else "--contract FILE"
            line = f"ctxemb restamp {run.target(t)} {change}"
            if c == "demo" and not run.shown:
                clauses.append(f"give it the demo's contract again: {line}")
            elif c == "restamp":
                continue  # what the user ran: the refusal says why
            else:
                clauses.append(f"accept the new query side deliberately: {line}")
        elif r.step is Step.MIGRATE:
            options, left = _contract_options(_contract_values(r, run), _migrate_takes)
            if left and not any(o.startswith("--model") for o in options):
                options.insert(0, "--model <model>")
            if run.given("url"):
                options.append(f"--url {shell_word(run.args.url)}")
            line = f"ctxemb migrate {run.target(t)} --to <new name> {' '.join(options)}".rstrip()
            clauses.append(f"re-embed it into a new collection: {line}")
        elif r.step is Step.REEMBED:
            clauses.append("re-embed the documents under this contract")
    if c == "demo" and not run.shown:
        again = run.again("collection", "<new name>")
        clauses.append(f"run the demo into a new collection: {again}")
    return _sentences(clauses)


#: A hybrid contract's fields (``lexical.k1``, ``fusion.k``: the part after the side) and the
#: options that set them.
_HYBRID_OPTIONS = {
    "k1": "k1",
    "b": "b",
    "stemmer": "stemmer",
    "stopwords": "stopwords",
    "method": "fusion",
    "k": "rrf_k",
    "weights": "weights",
    "depth": "depth",
}
_LEXICAL = ("k1", "b", "stemmer", "stopwords")
_FUSION = ("fusion", "rrf_k", "weights", "depth")


def _hybrid(by: dict[Step, Remedy], t: StoreTerms, run: Invocation) -> str:
    """A hybrid index's steps: the stamp's recipe or fusion, a rebuild, a new fusion, a refresh."""
    data = shell_word(run.args.data) if run.command == "index" else "<corpus>"
    index = f"ctxemb index {data} --hybrid {run.target(t)}"
    if Step.REFRESH in by:
        if run.command == "index" and getattr(run.args, "hybrid", False):
            return (
                "Run the same command again: the lexical side is rebuilt from the dense side's "
                "stored texts."
            )
        return f"Bring the lexical side back in step from the dense side's stored texts: {index}."
    step = by.get(Step.REBUILD_LEXICAL) or by[Step.SET_FUSION]
    lexical = step.step is Step.REBUILD_LEXICAL
    options = []
    for name, value in step.values:
        dest = _HYBRID_OPTIONS.get(name)
        if dest is None or value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        options.append(f"--{dest.replace('_', '-')} {shell_word(value)}")
    given = [run.typed(d) for d in (_LEXICAL if lexical else _FUSION) if run.given(d)]
    what = "recipe" if lexical else "fusion"
    verb = "keep" if run.command == "index" else "query with"
    clauses = [f"leave out {' and '.join(given)} to {verb} the stamp's {what}" if given else ""]
    change = " ".join(options)
    if lexical:
        clauses.append(
            f"rebuild the lexical side under yours (the dense vectors stay): {index} "
            f"--rebuild-lexical {change}".rstrip()
        )
    else:
        clauses.append(
            f"stamp this fusion as the index's own: {index} --set-fusion {change}".rstrip()
        )
    return _sentences(clauses)


def _use_index(r: Remedy, run: Invocation) -> str:
    """Embed under the index's contract, as this command can."""
    verb = "query with" if r.get("query") else "use"
    if run.command in _READS_STAMP:
        given = run.contract_given()
        if given:
            return f"leave out {' and '.join(given)} to {verb} the collection's own contract"
        return ""
    if run.command in ("restamp", "migrate", "detect"):
        return ""  # they read the stamp already
    values = _contract_values(r)
    options, left = _contract_options(values, run.has)
    if run.command == "demo" and (
        left or not options or not all(run.has(_PARAMS.get(f, f)) for f, _ in values)
    ):
        return ""  # the demo's contract is its model's: only --model can change it
    if not options or left:
        return f"{verb} the collection's own contract"
    return f"give {' '.join(options)} to {verb} the collection's own contract"


def _server(by: dict[Step, Remedy], t: StoreTerms, run: Invocation) -> str:
    serve = by[Step.SERVE]
    model = serve.get("model")
    options, _ = _contract_options(
        [(k, v) for k, v in serve.values if k in serve.fields and k != "model"],
        lambda d: d in contract_parameters(),
    )
    line = " ".join(["ctxemb serve", shell_word(model), *options])
    models = served_models(by)
    if models:
        # A server of several contracts: the one asked for is added with --also, and the
        # server has no contract of its own, only one per model id.
        line += " (beside the others: --also ID=CONTRACT.json)"
    clauses = [f"serve the contract asked for there: {line}"]
    given = " and ".join(run.contract_given())
    if given and run.command in _SERVER_DEFAULT and models and run.has("served_model"):
        listed = ", ".join(shell_word(m) for m in models)
        clauses.append(
            f"leave out {given} and give --served-model ID (one of {listed}) to use that "
            "model's contract"
        )
    elif given and run.command in _SERVER_DEFAULT and not models:
        clauses.append(f"leave out {given} to use the server's own contract")
    elif given and run.command in _READS_STAMP:
        clauses.append(f"leave out {given} if the server serves the collection's own contract")
    if run.given("url") and run.command not in _SERVER_DEFAULT:
        clauses.append("leave out --url to embed here")
    return _sentences(clauses)


def _give(r: Remedy, run: Invocation) -> str:
    parts: list[str] = []
    positional: tuple[str, Any] | None = None
    for dest, value in r.values:
        if dest in GIVE_CONTROLS:
            continue
        action = run.action(dest)
        if action is None:
            continue
        if not action.option_strings:
            positional = (dest, value)
        else:
            parts.append(_option(action.option_strings[0], value, action))
    if positional is not None:
        shown = " ".join([run.again(*positional), *parts])
    elif parts:
        shown = " ".join(parts)
    else:
        return ""
    return f"If {r.when}: {shown}." if r.when else f"Give {shown}."


def cli_message(exc: CtxembError, run: Invocation | None = None) -> str:
    """The error's message for the command line: its remedies worded for ``run`` (the
    command that was run), else in the command line's general terms."""
    remedies = getattr(exc, "remedies", ())
    if run is not None and remedies and getattr(exc, "_worded", False):
        advice = word(remedies, getattr(exc, "terms", None), run)
        return exc._worded_as(advice or f"See ctxemb {run.command} --help.")
    message_for = getattr(exc, "message_for", None)
    message = str(message_for("cli")) if callable(message_for) else str(exc)
    if run is not None and isinstance(exc, InvalidContractError):
        return _as_option(message, run)
    return message


#: The head of a refused contract value as the contract names it: ``truncate_dim=9999 is ...``,
#: ``max_tokens must be ...``.
_FIELD_HEAD = re.compile(r"(?P<field>[a-z_]+)(=| must )")


def _as_option(message: str, run: Invocation) -> str:
    """A refused contract value said of the option the command line set it with, as argparse
    says its own (``argument --truncate-dim: truncate_dim=9999 is larger ...``), where the
    message names the field first and the user gave that option: the field's name stays, as
    the command shows contracts with it."""
    head = _FIELD_HEAD.match(message)
    if head is None or head["field"] not in contract_parameters() or not run.given(head["field"]):
        return message  # a value the command line did not give (a stamp's, a folder's)
    option = run.typed(head["field"])
    return f"argument {option}: " + message.replace(" or None", f", or leave {option} out")
