"""The ``ctxemb_core.cli`` package's shape: commands share ``common``/``stores`` and never each
other's names, a store's options come from its adapter, and the command line works without a
store's client library for everything that needs no store."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ctxemb_core.cli as cli_package
from ctxemb_core.cli import STORES, _parser
from ctxemb_core.cli.app import COMMANDS
from ctxemb_core.cli.stores import StoreOptions

CLI = Path(cli_package.__file__).parent
#: The modules the commands share: the parser and errors, the store protocol, the hybrid options.
SHARED = {
    "ctxemb_core.cli.advice",
    "ctxemb_core.cli.common",
    "ctxemb_core.cli.stores",
    "ctxemb_core.cli.hybrid",
}
STORE_COMMANDS = ("index", "query", "verify", "migrate", "restamp", "detect")


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """Every import of a module (in functions too): (module, names imported from it)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [a.name for a in node.names]))
    return found


def cli_modules() -> dict[str, Path]:
    return {
        "ctxemb_core.cli." + p.stem if p.stem != "__init__" else "ctxemb_core.cli": p
        for p in sorted(CLI.glob("*.py"))
    }


def test_commands_import_the_shared_modules_and_never_each_other():
    commands = {f"ctxemb_core.cli.{m.__name__.rsplit('.', 1)[1]}" for m in COMMANDS.values()}
    assert len(commands) == len(COMMANDS) == 14
    for name, path in cli_modules().items():
        for module, names in imports(path):
            # No CLI module loads the package __init__ (which imports every model module).
            assert module != "ctxemb_core" or names == [], (name, module, names)
            cli_names = [f"{module}.{n}" for n in names] if module == "ctxemb_core.cli" else []
            targets = cli_names or [module]
            for target in targets:
                if not target.startswith("ctxemb_core.cli"):
                    continue
                if name in commands or name in SHARED:
                    assert target in SHARED, (name, target)
                    assert not [n for n in names if n.startswith("_")], (name, module, names)
                if name in SHARED:
                    assert target != name and not (
                        name == "ctxemb_core.cli.common" and target in SHARED
                    ), (name, target)  # common imports no other CLI module


def test_no_cli_module_imports_an_old_private_cli_module():
    for name, path in cli_modules().items():
        for module, _ in imports(path):
            assert not module.startswith("ctxemb_core._cli"), (name, module)


def test_the_old_export_module_is_the_new_one():
    from ctxemb_core import _cli_export
    from ctxemb_core.cli import export

    assert _cli_export.run is export.run and _cli_export.add_parser is export.add_parser


# -- store options ---------------------------------------------------------------------------


def test_the_store_table_names_each_adapters_options_module():
    import ctxemb_chroma.cli as chroma_options
    import ctxemb_pgvector.cli as pg_options

    assert STORES == {
        "chroma": "ctxemb_chroma.cli",
        "pgvector": "ctxemb_pgvector.cli",
        "qdrant": "ctxemb_qdrant.cli",
    }
    protocol = {n for n in vars(StoreOptions) if not n.startswith("_")}
    assert protocol == {
        "add_arguments",
        "check_arguments",
        "absent",
        "flags",
        "location",
        "connect",
        "adapter",
    }
    for name in protocol:
        assert callable(getattr(chroma_options, name)), name
        assert callable(getattr(pg_options, name)), name
    assert chroma_options.adapter() is sys.modules["ctxemb_chroma"]
    assert pg_options.adapter() is sys.modules["ctxemb_pgvector"]


def _store_actions(parser: argparse.ArgumentParser) -> list[tuple[tuple[str, ...], str | None]]:
    return [
        (tuple(a.option_strings), a.help)
        for a in parser._actions
        if set(a.option_strings) & {"--path", "--host", "--port"}
    ]


@pytest.mark.parametrize("demo", [False, True])
def test_the_store_commands_take_their_store_options_from_the_adapter(demo):
    import ctxemb_chroma.cli as chroma_options

    own = argparse.ArgumentParser()
    chroma_options.add_arguments(own, demo=demo)
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("demo",) if demo else STORE_COMMANDS:
        assert _store_actions(action.choices[name]) == _store_actions(own), name


def test_no_store_option_is_declared_in_the_generic_cli_code():
    # eval's --path/--host/--port belong to its --via paths (a temporary server among them);
    # serve's --host/--port are where the embedding server itself listens, not a store's.
    for name, path in cli_modules().items():
        if name in ("ctxemb_core.cli.eval", "ctxemb_core.cli.serve"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                first = node.args[0] if node.args else None
                spelled = first.value if isinstance(first, ast.Constant) else None
                assert spelled not in ("--path", "--host", "--port"), (name, spelled)
            if isinstance(node, ast.Constant):  # the defaults: ./chroma, port 8000
                assert node.value not in ("./chroma", 8000), (name, node.value)


def test_the_adapters_check_refuses_what_the_cli_refused():
    import ctxemb_chroma.cli as chroma_options
    from ctxemb_core.errors import InvalidInputError

    args = argparse.Namespace(path="p", host="h", port=None)
    with pytest.raises(InvalidInputError, match="--host h and --path p name two stores"):
        chroma_options.check_arguments(args)
    args = argparse.Namespace(path=None, host=None, port=9)
    with pytest.raises(InvalidInputError, match="--port 9 needs --host"):
        chroma_options.check_arguments(args)
    args = argparse.Namespace(path=None, host=None, port=None)
    chroma_options.check_arguments(args, demo=True)
    assert chroma_options.flags(args) == "--path ./ctxemb-demo-chroma"
    args = argparse.Namespace(path=None, host="h", port=None)
    chroma_options.check_arguments(args)
    assert (chroma_options.flags(args), chroma_options.location(args)) == (
        "--host h --port 8000",
        "h:8000",
    )


# -- without chromadb ------------------------------------------------------------------------

_WITHOUT_CHROMADB = """
import importlib.abc, io, json, sys, contextlib

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        # every store's client library: with none, the store commands cannot be built
        if name.split(".")[0] in ("chromadb", "psycopg", "pgvector", "qdrant_client"):
            raise ImportError(f"{name} is blocked in this test")
        return None

if BLOCK:
    sys.meta_path.insert(0, Blocker())
import ctxemb_core.cli
from ctxemb_core.cli import main

out = {"imported": "chromadb" in sys.modules}
for argv in (["--help"], ["inspect", "--help"], ["export", "--help"], ["index", "--help"]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    out[argv[0]] = [code, stdout.getvalue(), stderr.getvalue()]
    out[argv[0] + " loaded chromadb"] = "chromadb" in sys.modules
    out[argv[0] + " loaded the options"] = "ctxemb_chroma.cli" in sys.modules
    out[argv[0] + " loaded qdrant-client"] = "qdrant_client" in sys.modules
    out[argv[0] + " loaded psycopg"] = "psycopg" in sys.modules
print(json.dumps(out))
"""


def _run(block: bool) -> dict:
    import json

    code = textwrap.dedent(_WITHOUT_CHROMADB).replace("BLOCK", str(block))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_command_line_works_without_chromadb_except_the_store_commands():
    out = _run(block=True)
    assert not out["imported"]
    for command in ("--help", "inspect", "export"):
        code, stdout, stderr = out[command]
        assert code == 0 and stderr == "" and "usage: ctxemb" in stdout, command
    assert "index" in out["--help"][1] and "COMMAND" in out["--help"][1]
    code, stdout, stderr = out["index"]
    assert code == 2 and stdout == ""
    assert stderr.splitlines() == [
        "ctxemb: error: MissingDependencyError: the 'chroma' store needs its adapter: pip "
        "install 'ctxemb[chroma]' (ctxemb_chroma needs chromadb: pip install 'ctxemb[chroma]')"
    ]


def test_only_the_command_that_is_run_loads_a_stores_adapter():
    out = _run(block=False)
    assert not out["imported"]
    assert not out["--help loaded chromadb"]
    assert not out["inspect loaded chromadb"]
    assert not out["export loaded chromadb"]
    code, stdout, _ = out["index"]
    assert code == 0 and "--path PATH" in stdout
    # The store commands' parsers hold every store's options, read from each adapter's options
    # module; no client library is imported until a store is opened (each costs ~1-1.5 CPU-s
    # of a command's start; psycopg ~0.2).
    assert out["index loaded the options"] and not out["inspect loaded the options"]
    assert not out["index loaded chromadb"] and not out["index loaded qdrant-client"]
    assert not out["index loaded psycopg"]
