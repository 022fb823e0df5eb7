"""The stores the ``ctxemb`` commands reach, and the options each store's adapter declares.

A store's options (where it is, how to reach it) are its adapter's knowledge, not the CLI's:
:data:`STORES` names, for each store, a module of its adapter that follows the protocol
:class:`StoreOptions`, and the commands call only that protocol. The adapter is imported when a
parser is built or a store is opened, never when this module is imported, so the core (and
``ctxemb --help``) works without any store's client library installed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import os
import shlex
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ctxemb_core.cli.common import PORT, Parser, ray_integration
from ctxemb_core.errors import InvalidInputError, MissingDependencyError
from ctxemb_core.redact import redact_dsn

__all__ = [
    "PORT",
    "STORES",
    "AdapterDefaults",
    "ConnectionString",
    "FolderOrServer",
    "FolderOrUrl",
    "Scope",
    "StoreOptions",
    "choose_store",
    "demo_store_args",
    "open_store",
    "options_of",
    "options_only_for",
    "scoped",
    "store_args",
    "store_filled",
    "store_options",
    "where",
]

#: The one command whose parser gets the stores' options (``None``: every command's).
_ONLY: ContextVar[str | None] = ContextVar("ctxemb_cli_store_options_for", default=None)

#: The stores the CLI has adapters for: ``--store`` NAME -> the adapter's module of CLI options
#: (a :class:`StoreOptions`), inside the import package ``ctxemb_<store>``.
STORES = {
    "chroma": "ctxemb_chroma.cli",
    "pgvector": "ctxemb_pgvector.cli",
    "qdrant": "ctxemb_qdrant.cli",
}
#: The store a command uses when nothing on its command line or in the environment names one.
DEFAULT_STORE = "chroma"
#: Each store in the words a summary line and an error use.
LABELS = {"chroma": "Chroma", "pgvector": "PostgreSQL", "qdrant": "Qdrant"}
#: The options each store's adapter adds (its ``add_arguments``; a test holds the two equal):
#: known without importing the adapter, so that one given where the adapter is not installed
#: is named as that store's, with the install it needs, not as a mistyped option.
STORE_FLAGS = {
    "chroma": ("--path", "--host", "--port"),
    "pgvector": ("--dsn", "--schema"),
    "qdrant": ("--qdrant-path", "--qdrant-url"),
}
#: The namespace attribute where a parser keeps which of its options each store added.
_OWNED = "_ctxemb_store_options"


class StoreOptions(Protocol):
    """What a store's adapter gives the CLI: its options, checked together, and a client.

    The options land on the command's ``argparse.Namespace`` under the adapter's own names
    (Chroma: ``path``, ``host``, ``port``); only the adapter reads them. This module is the one
    an adapter imports for it: :data:`PORT` is the ``type=`` of a port option, whose errors read
    like every other integer option's; :class:`FolderOrServer` checks a store's ``--path``, or
    ``--host`` and ``--port``.
    """

    def add_arguments(self, parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
        """Add the options that say where the store is (``demo``: the demo's own store)."""

    def check_arguments(self, args: argparse.Namespace, *, demo: bool = False) -> None:
        """Check the options together and fill in their defaults; raise InvalidInputError."""

    def absent(self, args: argparse.Namespace) -> bool:
        """Whether the options (not yet checked) name a store that is not there yet."""

    def flags(self, args: argparse.Namespace) -> str:
        """The checked options as a shell would take them, for a command line to copy."""

    def location(self, args: argparse.Namespace) -> str:
        """Where the checked options point, in a few words."""

    def connect(self, args: argparse.Namespace, *, create: bool) -> Any:
        """A client of the store (closed with ``.close()``); ``create=False`` never makes one."""

    def adapter(self) -> Any:
        """The adapter module, which offers :data:`ctxemb_core.store_tools.ADAPTER_API`."""

    # Optional: ``defaults() -> dict[str, str]``, the defaults ``check_arguments`` fills in (by
    # dest) in the words a help text shows (a value from the environment as its variable:
    # ``$CTXEMB_PG_DSN``; see :class:`AdapterDefaults`); ``from_environment() -> str | None``,
    # what in the environment selects the store when no store option is given (pgvector:
    # ``$CTXEMB_PG_DSN``); ``scope(args) -> dict``, keywords the checked options set on every
    # adapter call that takes them (pgvector: ``schema``); ``ray_session(args, name)``, the
    # ``StoreSession`` of index ``name`` that ``ctxemb index --ray`` gives every actor
    # (the ``ctxemb_ray`` integration), or ``InvalidInputError`` for options a cluster's nodes
    # cannot all reach. A store without them is selected by its options alone, has no scope,
    # its help shows no default, and ``--ray`` cannot write to it.


def store_options(store: str) -> StoreOptions:
    """The store's :class:`StoreOptions`, loaded by name only now."""
    try:
        module: StoreOptions = importlib.import_module(STORES[store])
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {store!r} store needs its adapter: pip install 'ctxemb[{store}]' ({exc})"
        ) from None
    return module


class AdapterDefaults(str):
    """A help text that shows a store adapter's defaults, read only when the help is printed.

    For a command that takes a store's options under its own names (``ctxemb eval``): its
    parser is built without importing the adapter, and ``%(STORE.DEST)s`` in the text (e.g.
    ``%(chroma.path)s``) is the adapter's ``defaults()[DEST]`` when argparse fills the help in
    (with ``%``, just before printing it); without the adapter, its name stands there.
    """

    store: str

    def __new__(cls, text: str, store: str) -> AdapterDefaults:
        made = super().__new__(cls, text)
        made.store = store
        return made

    def __mod__(self, params: Any) -> str:
        label = LABELS.get(self.store, self.store)
        shown: dict[str, str] = {}
        with contextlib.suppress(MissingDependencyError):
            shown = getattr(store_options(self.store), "defaults", dict)()
        words = {
            f"{self.store}.{dest}": shown.get(dest, f"the {label} adapter's")
            for dest in (flag[2:].replace("-", "_") for flag in STORE_FLAGS[self.store])
        }
        return str(self).__mod__({**dict(params), **words})


def store_filled(store: str, **given: Any) -> argparse.Namespace:
    """A store's options as its adapter checks them and fills in their defaults.

    For a command that takes a store's options under its own names (``ctxemb eval --via``):
    ``given`` are the options by dest (``None``: left out); the adapter's
    :meth:`StoreOptions.check_arguments` refuses what does not go together and fills in the
    rest, so that no command keeps a second copy of a store's defaults.
    """
    options = argparse.Namespace(**given)
    store_options(store).check_arguments(options)
    return options


def store_args(p: argparse.ArgumentParser, *, collection_required: bool = True) -> None:
    """``--collection``, ``--store``, each store's own options, and ``--no-cache``.

    A store whose adapter is not installed adds nothing; when no store can, the command says
    which ``pip install`` it needs as soon as it is chosen (see :class:`Parser`).
    """
    p.add_argument("--collection", required=collection_required, help="collection name")
    p.add_argument(
        "--store",
        default=None,
        choices=STORES,
        help="the store's adapter (default: the store whose options are given: pgvector for "
        "--dsn or --schema, chroma for --path, --host or --port, qdrant for --qdrant-path or "
        "--qdrant-url; without any, pgvector when $CTXEMB_PG_DSN is set, else chroma)",
    )
    _adapters_args(p)
    p.add_argument(
        "--no-cache", action="store_true", help="do not read or write the embedding cache"
    )


def demo_store_args(p: argparse.ArgumentParser) -> None:
    """``--store`` and each store's options for the demo's own store (collection: the demo's).

    The demo runs on Chroma only: ``--store`` is not listed in its help, and another store
    given is refused by that store's adapter with the reason.
    """
    p.add_argument("--store", default="chroma", choices=STORES, help=argparse.SUPPRESS)
    _adapters_args(p, demo=True)


@contextlib.contextmanager
def options_only_for(prog: str | None) -> Iterator[None]:
    """Parsers built in the block get the stores' options only if their ``prog`` is ``prog``.

    :func:`~ctxemb_core.cli.app.main` runs one command: importing a store's adapter (and its
    client library) to build the options of the commands it does not run would only slow
    ``ctxemb --help`` and the commands that use no store. The parsers left without them are
    never parsed; should one be, it says so instead of misreading its arguments.
    """
    token = _ONLY.set(prog)
    try:
        yield
    finally:
        _ONLY.reset(token)


def _adapters_args(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
    only = _ONLY.get()
    if only is not None and p.prog != only:
        if isinstance(p, Parser):
            p.unavailable = InvalidInputError(f"{p.prog}: built without its store's options")
        return
    missing: list[MissingDependencyError] = []
    owned: dict[str, list[tuple[str, str]]] = {}
    for store in STORES:
        try:
            options = store_options(store)
        except MissingDependencyError as exc:
            missing.append(exc)
            continue
        before = len(p._actions)
        options.add_arguments(p, demo=demo)
        # Which options are this store's, for choose_store: (dest, the flag as typed).
        owned[store] = [(a.dest, a.option_strings[0]) for a in p._actions[before:]]
    p.set_defaults(**{_OWNED: owned})
    if missing and len(missing) == len(STORES) and isinstance(p, Parser):
        p.unavailable = missing[0]
    if isinstance(p, Parser):
        for store in STORES:
            if store not in owned:
                for flag in STORE_FLAGS[store]:
                    p.absent_options[flag] = MissingDependencyError(
                        f"{p.prog}: {flag} is an option of the {LABELS[store]} store, whose "
                        f"adapter is not installed: pip install 'ctxemb[{store}]'"
                    )


def _given(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each store's options that the command line gave (flags), by store."""
    owned: dict[str, list[tuple[str, str]]] = getattr(args, _OWNED, {}) or {}
    return {
        store: [flag for dest, flag in dests if getattr(args, dest, None) is not None]
        for store, dests in owned.items()
    }


def choose_store(args: argparse.Namespace) -> str:
    """The store the command uses, set on ``args.store``; options of another store refused.

    ``--store`` decides when given, and an option of another store beside it is refused
    (``--dsn`` with ``--store chroma``). Without it, the store whose options are given is the
    one (``--dsn`` selects pgvector, ``--path`` Chroma; both: refused). Without any store
    option, a store the environment names (``$CTXEMB_PG_DSN``), else :data:`DEFAULT_STORE`.
    No store option is ever silently ignored.
    """
    given = _given(args)
    chosen = getattr(args, "store", None)
    if chosen is not None:
        for store, flags in given.items():
            if store != chosen and flags:
                own = ", ".join(f for _, f in getattr(args, _OWNED, {}).get(chosen, [])) or "none"
                raise InvalidInputError(
                    f"{flags[0]} is a {LABELS.get(store, store)} option; --store {chosen} "
                    f"takes {own} (leave out --store {chosen} to use {LABELS.get(store, store)})"
                )
        return str(chosen)
    naming = {store: flags for store, flags in given.items() if flags}
    if len(naming) > 1:
        shown = " and ".join(
            f"{flags[0]} ({LABELS.get(store, store)})" for store, flags in naming.items()
        )
        raise InvalidInputError(f"{shown} name two stores: give the options of one store")
    if naming:
        chosen = next(iter(naming))
    else:
        chosen = DEFAULT_STORE
        for store in given:
            from_environment = getattr(store_options(store), "from_environment", None)
            if callable(from_environment) and from_environment():
                chosen = store
                break
    args.store = chosen
    return chosen


def where(args: argparse.Namespace) -> str:
    """The store the checked options name, in a summary line's words (no password)."""
    return f"{LABELS.get(args.store, args.store)} {store_options(args.store).location(args)}"


def scoped(adapter: Any, options: Any, args: argparse.Namespace) -> Any:
    """``adapter`` with the keywords of the options' ``scope`` given to every call taking them.

    The commands call the adapter as every store's (``open_collection(client, name, ...)``);
    a store's own scope (pgvector's ``--schema``) reaches each call here, so that no command
    can leave it out.
    """
    scope = getattr(options, "scope", None)
    found = scope(args) if callable(scope) else {}
    return _Scoped(adapter, found) if found else adapter


class _Scoped:
    """An adapter module whose functions get ``scope``'s keywords (where they take them)."""

    def __init__(self, adapter: Any, scope: dict[str, Any]) -> None:
        self._adapter = adapter
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._adapter, name)
        if not inspect.isroutine(inspect.unwrap(value)):  # a function, or a tool's method
            return value
        params = inspect.signature(value).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        given = {k: v for k, v in self._scope.items() if k in params or takes_any}
        return functools.partial(value, **given) if given else value

    def __repr__(self) -> str:
        return f"<{self._adapter.__name__} with {self._scope}>"


@contextlib.contextmanager
def open_store(
    args: argparse.Namespace, *, create: bool, demo: bool = False
) -> Iterator[tuple[Any, Any]]:
    """The store's adapter and a client for it, closed when the block ends.

    ``create=False`` (commands that only read) refuses a store that is not there instead of
    creating an empty one. A server's client holds sockets until it is closed.
    """
    if not demo:
        choose_store(args)
    options = store_options(args.store)
    options.check_arguments(args, demo=demo)
    adapter = scoped(options.adapter(), options, args)
    # --to names an index of this store unless --to-store (or a --to-* option) named another,
    # whose adapter checks it (ctxemb migrate).
    named = ("collection",) if getattr(args, "to_store", None) else ("collection", "to")
    for option in named:
        if getattr(args, option, None) is not None:
            adapter.check_name(getattr(args, option))  # before connecting creates a store
    client = options.connect(args, create=create)
    try:
        yield adapter, client
    finally:
        client.close()


def catalog_of(adapter: Any, client: Any) -> Any:
    """The store as its aliases and upgrades see it (the adapter's ``catalog``)."""
    catalog = getattr(adapter, "catalog", None)
    if catalog is None:
        raise InvalidInputError("this store's adapter keeps no aliases")
    return catalog(client)


def alias_arg(p: argparse.ArgumentParser) -> None:
    """``--alias``: reach the index an alias serves instead of naming it (``--collection``)."""
    p.add_argument(
        "--alias",
        help="the alias of the collection (instead of --collection): its current index, and "
        "while it is upgrading, writes go to every index it writes",
    )


def collection_or_alias(args: argparse.Namespace) -> None:
    """Exactly one of ``--collection`` and ``--alias``."""
    if (args.collection is None) == (getattr(args, "alias", None) is None):
        raise InvalidInputError(
            "give the collection: --collection NAME, or --alias NAME for the one an alias serves"
            if args.collection is None
            else "--collection and --alias both name the collection: give one"
        )


def resolve_alias(args: argparse.Namespace, adapter: Any, client: Any) -> Any:
    """With ``--alias``: its record, and ``args.collection`` set to the index it serves now."""
    if getattr(args, "alias", None) is None:
        return None
    from ctxemb_core.aliases import read_alias

    record = read_alias(catalog_of(adapter, client), args.alias)
    args.collection = record.target.index
    return record


#: What a store's options module may leave to the shared options object it builds
#: (:class:`FolderOrServer`, :class:`FolderOrUrl`, :class:`ConnectionString`): the
#: :class:`StoreOptions` methods about the options themselves, and the optional ``defaults``,
#: ``from_environment`` and ``scope``. ``connect`` is always the module's own; ``adapter``, unless
#: the module defines it, is the package the module is in (:func:`options_of`).
SHARED_OPTIONS = (
    "absent",
    "add_arguments",
    "check_arguments",
    "defaults",
    "flags",
    "from_environment",
    "location",
    "scope",
)


def options_of(module: str, options: Callable[[], Any]) -> Callable[[str], Any]:
    """A store options module's ``__getattr__`` (PEP 562): each of :data:`SHARED_OPTIONS` it
    does not define itself is the options object's that ``options()`` builds at the call,
    ``adapter()`` is the package the module is in, and ``connect(args, create=)`` that
    package's ``connect`` with the object's ``connection(args, create=)`` (the checked options
    as its keywords; the store's client library imported only then), and ``ray_session(args,
    name)`` the ``ctxemb_ray.AdapterSession`` of index ``name`` with the object's
    ``ray_connection(args)`` and ``scope(args)`` (where it has them).

    Built at the call, the object holds the module's defaults as they are then (a default
    changed there is the one every command fills in and shows); a method the object lacks is
    the module's ``AttributeError``, as a function it never had (so ``getattr(module,
    "from_environment", None)`` is ``None`` for a store no environment selects).

    Example:
        >>> __getattr__ = options_of(__name__, lambda: FolderOrServer("Chroma", DEFAULT_PATH,
        ...                                         DEFAULT_PORT, DEMO_PATH))  # doctest: +SKIP
    """

    package = module.rpartition(".")[0]  # the adapter, named: each Ray actor imports it too

    def adapter() -> Any:
        return importlib.import_module(package)  # imported only now

    def connect(args: argparse.Namespace, *, create: bool) -> Any:
        return adapter().connect(**options().connection(args, create=create))

    def ray_session(args: argparse.Namespace, name: str) -> Any:
        made = options()
        scope = made.scope(args) if hasattr(made, "scope") else {}
        return ray_integration().AdapterSession(package, name, made.ray_connection(args), scope)

    def shared(name: str) -> Any:
        if name == "adapter":
            return adapter
        if name == "connect" and hasattr(options(), "connection"):
            return connect
        if name == "ray_session" and hasattr(options(), "ray_connection"):
            return ray_session
        if name in SHARED_OPTIONS and hasattr(options(), name):

            @functools.wraps(getattr(options(), name))
            def call(*args: Any, **kwargs: Any) -> Any:
                return getattr(options(), name)(*args, **kwargs)

            return call
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return shared


@dataclass(frozen=True)
class FolderOrServer:
    """The options of a store that is either a folder on this machine or a server: ``--path``,
    or ``--host`` and ``--port`` (Chroma's; a store such as Qdrant or LanceDB has the same
    pair), checked together, their defaults filled in, and said back (``flags``, ``location``,
    ``absent``), the same for every such store. The adapter's module declares the options
    (``add_arguments``) with these defaults (``path``, ``port``; the demo's own folder:
    ``demo_path``) in their help; ``store``: its name in messages.

    Example:
        >>> FolderOrServer("Chroma", path="./chroma", port=8000, demo_path="./demo").defaults()
        {'path': './chroma', 'port': '8000'}
    """

    store: str
    path: str
    port: int
    demo_path: str

    def check_arguments(self, args: argparse.Namespace, *, demo: bool = False) -> None:
        """``--path``, ``--host`` and ``--port`` checked together, their defaults filled in.

        A port alone is refused rather than taken to mean a server on 127.0.0.1: without
        ``--host`` the store is the embedded folder, and a server that was meant but is not
        named must not turn into a quiet read of the default folder (or a write into a new one).
        """
        if args.host is not None and args.path is not None:
            raise InvalidInputError(
                f"--host {args.host} and --path {args.path} name two stores: give --host (and "
                f"--port) for a {self.store} server, or --path for an embedded folder"
            )
        if args.port is not None and args.host is None:
            raise InvalidInputError(
                f"--port {args.port} needs --host: a port belongs to a server (e.g. --host "
                f"127.0.0.1 --port {args.port}); for an embedded folder give --path alone"
            )
        if args.host is None:
            if args.path is None:
                args.path = self.demo_path if demo else self.path
        elif args.port is None:
            args.port = self.port

    def defaults(self) -> dict[str, str]:
        """The defaults :meth:`check_arguments` fills in, as a help text shows them."""
        return {"path": self.path, "port": str(self.port)}

    def absent(self, args: argparse.Namespace) -> bool:
        """Whether ``--path`` names a folder that does not exist (and no ``--host`` is given)."""
        return bool(not args.host and args.path and not Path(args.path).exists())

    def flags(self, args: argparse.Namespace) -> str:
        """The store options that name the store ``args`` point at, as a shell would take them."""
        if args.host is not None:
            return f"--host {shlex.quote(args.host)} --port {args.port}"
        return f"--path {shlex.quote(str(args.path))}"

    def location(self, args: argparse.Namespace) -> str:
        """The folder, or ``host:port`` of the server."""
        return str(args.path or f"{args.host}:{args.port}")

    def connection(self, args: argparse.Namespace, *, create: bool) -> dict[str, Any]:
        """The adapter's ``connect`` keywords (``create=False``: no new store)."""
        return {"path": args.path, "host": args.host, "port": args.port, "create": create}

    def ray_connection(self, args: argparse.Namespace) -> dict[str, Any]:
        """The ``connect`` keywords of every Ray actor: a server's, which every node reaches."""
        if args.host is None:
            raise InvalidInputError(
                f"--ray writes to a {self.store} server every actor can reach: give --host and "
                "--port (an embedded folder is one process's)"
            )
        return {"host": args.host, "port": args.port}


@dataclass(frozen=True)
class Scope:
    """A store's option that scopes the names of its indexes (PostgreSQL's ``--schema``; a
    database or namespace elsewhere): its default filled in, checked by the store's ``check``
    (``check(value, "--flag")``), given to every adapter call that takes the keyword
    (``scope(args)``, :func:`scoped`) and said back only where it is not the default.

    Example:
        >>> Scope("schema", "public", "PostgreSQL: the tables' schema")  # doctest: +SKIP
    """

    name: str
    default: str
    help: str
    check: Callable[[str, str], Any] | None = None

    def add_argument(self, parser: argparse.ArgumentParser) -> None:
        # No argparse default: check_arguments fills it in (a help shows the module's own).
        parser.add_argument(
            f"--{self.name}", default=None, help=f"{self.help} (default: {self.default})"
        )

    def fill(self, args: argparse.Namespace) -> None:
        if getattr(args, self.name, None) is None:
            setattr(args, self.name, self.default)
        if self.check is not None:
            self.check(getattr(args, self.name), f"--{self.name}")

    def flags(self, args: argparse.Namespace) -> str:
        value = getattr(args, self.name, None)
        return "" if value in (None, self.default) else f" --{self.name} {shlex.quote(value)}"


@dataclass(frozen=True)
class ConnectionString:
    """The option of a store reached by one connection string (PostgreSQL's ``--dsn``; a
    server's URL): given, or taken from the environment variable ``env``, required, and said
    back with its password masked (``flags``, ``location``), the same for every such store.
    ``store``: its ``--store`` name; ``label`` its name in words; ``example``: a string to show;
    ``within``: the store's :class:`Scope` option, if it has one (PostgreSQL's ``--schema``).

    Example:
        >>> ConnectionString("pgvector", "PostgreSQL", "CTXEMB_PG_DSN", "postgresql://h/db").defaults()
        {'dsn': '$CTXEMB_PG_DSN'}
    """

    store: str
    label: str
    env: str
    example: str
    flag: str = "dsn"
    within: Scope | None = None
    #: The adapter's ``connect`` keyword that lets it make what the store lacks (pgvector's
    #: ``create_extension``), given ``connect(args, create=)``'s ``create``.
    create: str = "create"

    def add_argument(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            f"--{self.flag}",
            help=f"the {self.label} connection string (default: ${self.env}); selects "
            f"--store {self.store}",
        )

    def add_arguments(self, parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
        """The string's option and the scope's (the demo runs on the default store: none)."""
        if demo:
            return
        self.add_argument(parser)
        if self.within is not None:
            self.within.add_argument(parser)

    def scope(self, args: argparse.Namespace) -> dict[str, Any]:
        """The keywords of the adapter's calls that the checked options set (the scope's)."""
        return {} if self.within is None else {self.within.name: getattr(args, self.within.name)}

    def check_arguments(self, args: argparse.Namespace, *, demo: bool = False) -> None:
        """The string given, or taken from ``$env`` (another store's options beside it are
        refused before, by :func:`choose_store`); the demo runs on the default store only."""
        if demo:
            raise InvalidInputError(
                f"the demo runs on {LABELS[DEFAULT_STORE]}: leave out --store {self.store}"
            )
        if getattr(args, self.flag, None) is None:
            setattr(args, self.flag, os.environ.get(self.env))
        if not getattr(args, self.flag):
            raise InvalidInputError(
                f"--store {self.store} needs --{self.flag} (a {self.label} connection string, "
                f"e.g. {self.example}) or ${self.env}"
            )
        if self.within is not None:
            self.within.fill(args)

    def defaults(self) -> dict[str, str]:
        """The defaults :meth:`check_arguments` fills in, as a help text shows them."""
        scope = {} if self.within is None else {self.within.name: self.within.default}
        return {self.flag: f"${self.env}", **scope}

    def from_environment(self) -> str | None:
        """What selects this store when no store option is given: ``$env``, if set."""
        return f"${self.env}" if os.environ.get(self.env) else None

    def absent(self, args: argparse.Namespace) -> bool:
        """A server is never "not there yet" the way a folder is: connecting says so."""
        return False

    def flags(self, args: argparse.Namespace) -> str:
        """The options as a command line to run, never holding a password: where the string
        has one, the variable that holds it (when it came from there), else the string with
        ``<password>`` to fill in (a masked one would be sent as it is)."""
        given = getattr(args, self.flag)
        shown = shlex.quote(redact_dsn(given))
        if isinstance(given, str) and redact_dsn(given) != given:
            from_env = os.environ.get(self.env) == given
            shown = f'"${self.env}"' if from_env else shlex.quote(redact_dsn(given, "<password>"))
        scope = "" if self.within is None else self.within.flags(args)
        return f"--store {self.store} --{self.flag} {shown}{scope}"

    def location(self, args: argparse.Namespace) -> str:
        """The connection string, its password masked (and the scope)."""
        within = self.within
        scope = "" if within is None else f" {within.name} {getattr(args, within.name)}"
        return redact_dsn(getattr(args, self.flag)) + scope

    def connection(self, args: argparse.Namespace, *, create: bool) -> dict[str, Any]:
        """The adapter's ``connect`` keywords: the string, and :attr:`create`."""
        return {self.flag: getattr(args, self.flag), self.create: create}

    def ray_connection(self, args: argparse.Namespace) -> dict[str, Any]:
        """The ``connect`` keywords of every Ray actor: the string."""
        return {self.flag: getattr(args, self.flag)}


@dataclass(frozen=True)
class FolderOrUrl:
    """The options of a store that is either a folder on this machine or a server reached by
    URL (Qdrant's ``--qdrant-path`` / ``--qdrant-url``; a store such as LanceDB has the same
    pair): named after the store (``--{store}-path``, ``--{store}-url``, so they never collide
    with another store's ``--path``), checked together, the folder's default filled in, said
    back with a URL's password masked. A server's key is read from ``$key_env`` only, never
    from the command line (seen by every user of the machine, kept in shell histories), and is
    never shown. ``label``: the store in words.

    Example:
        >>> FolderOrUrl("qdrant", "Qdrant", "./qdrant", "CTXEMB_QDRANT_API_KEY").defaults()
        {'qdrant_path': './qdrant'}
    """

    store: str
    label: str
    path: str
    key_env: str

    def add_arguments(self, parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
        """``--{store}-path`` and ``--{store}-url`` (the demo runs on the default store)."""
        if demo:
            return
        parser.add_argument(
            f"--{self.store}-path",
            help=f"a {self.label} folder (default with --store {self.store}: {self.path}); "
            f"selects --store {self.store}",
        )
        parser.add_argument(
            f"--{self.store}-url",
            help=f"a {self.label} server's URL (its key from ${self.key_env}); selects --store "
            f"{self.store}",
        )

    def _given(self, args: argparse.Namespace) -> tuple[str | None, str | None]:
        return getattr(args, f"{self.store}_path", None), getattr(args, f"{self.store}_url", None)

    def check_arguments(self, args: argparse.Namespace, *, demo: bool = False) -> None:
        """One of the two; without either, the folder's default."""
        if demo:
            raise InvalidInputError(
                f"the demo runs on {LABELS[DEFAULT_STORE]}: leave out --store {self.store}"
            )
        path, url = self._given(args)
        if path is not None and url is not None:
            raise InvalidInputError(
                f"--{self.store}-path and --{self.store}-url name two stores: give "
                f"--{self.store}-url for a server, or --{self.store}-path for a folder"
            )
        setattr(args, f"{self.store}_path", self.path if url is None and path is None else path)
        setattr(args, f"{self.store}_url", url)

    def defaults(self) -> dict[str, str]:
        return {f"{self.store}_path": self.path}

    def absent(self, args: argparse.Namespace) -> bool:
        """Whether the folder named does not exist (and no URL is given)."""
        path, url = self._given(args)
        return bool(not url and path and not Path(path).exists())

    def flags(self, args: argparse.Namespace) -> str:
        path, url = self._given(args)
        kind, value = ("url", redact_dsn(url)) if url is not None else ("path", str(path))
        return f"--store {self.store} --{self.store}-{kind} {shlex.quote(value)}"

    def location(self, args: argparse.Namespace) -> str:
        """The folder, or the server's URL (a password in it masked)."""
        path, url = self._given(args)
        return redact_dsn(url) if url else str(path)

    def where(self, args: argparse.Namespace) -> dict[str, Any]:
        """The checked options as a ``connect(path=..., url=..., api_key=...)``'s keywords."""
        path, url = self._given(args)
        if url is not None:
            return {"url": url, "api_key": os.environ.get(self.key_env) or None}
        return {"path": path}

    def connection(self, args: argparse.Namespace, *, create: bool) -> dict[str, Any]:
        """:meth:`where`, and for a folder ``create`` (``False``: no new store)."""
        where = self.where(args)
        return where if "url" in where else {**where, "create": create}
