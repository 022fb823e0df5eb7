"""``ctxemb eval``: the published tables through every path.

One task per run (retrieval on a BEIR split, or STS), through one ``--via``: the core's exact
search, a guarded Chroma collection (embedded, or a server: one given by ``--host`` or a
temporary one started here), or the Haystack and LangChain adapters over their in-memory store
or Chroma. Each path is its adapter's ``eval_path``, loaded by name only when asked for, so the
store's distance becomes a score inside its adapter. Progress goes to stderr; the last line on
stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxemb_core.cli.common import (
    COUNT,
    DEFAULT_MODEL,
    PORT,
    POSITIVE,
    command_contract,
    contract_args,
    embedder,
    examples,
    non_empty,
    remote_args,
)
from ctxemb_core.cli.hybrid import check_hybrid_args, hybrid_args
from ctxemb_core.cli.stores import AdapterDefaults, store_filled, store_options
from ctxemb_core.errors import (
    DataFormatError,
    InvalidInputError,
    MissingDependencyError,
    StoreUnavailableError,
)
from ctxemb_core.eval.paths import VIAS
from ctxemb_core.validate import check_text, check_texts

TASKS = ("retrieval", "sts")
BASELINES = ("bm25",)
#: The source checkout ctxemb runs from (``None``: installed from a wheel, in site-packages).
_ROOT = Path(__file__).resolve().parents[2]
_CHECKOUT: Path | None = _ROOT if (_ROOT / "pyproject.toml").is_file() else None
#: The evaluation data beside a checkout (``../shared/data``), used when ``--data`` is not given;
#: none for an installed ctxemb, whose wheel holds no evaluation data.
_DEFAULT_DATA: dict[str, Path] = (
    {
        "retrieval": _CHECKOUT.parent / "shared" / "data" / "scifact",
        "sts": _CHECKOUT.parent / "shared" / "data" / "stsbenchmark",
    }
    if _CHECKOUT is not None
    else {}
)
#: What ``--data`` names, by task.
_DATA_IS = {
    "retrieval": "a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv; e.g. SciFact)",
    "sts": "the STS Benchmark folder (sts-test.csv) or one of its csv files",
}
#: The figures printed as the table; the JSON holds every metric.
_HEADLINE = ("ndcg@10", "recall@100", "mrr@10", "map@100")
_SERVER_WAIT = 60.0  # seconds a temporary Chroma server may take to answer its first heartbeat

# Which store options each path uses; any other one given is refused rather than ignored.
_USES = {
    "memory": set(),
    "chroma": {"collection", "path", "host", "port", "sample"},
    "chroma-server": {"collection", "path", "host", "port", "sample"},
    "haystack": {"collection"},
    "langchain": {"collection"},
    "haystack-chroma": {"collection", "path", "host", "port"},
    "langchain-chroma": {"collection", "path", "host", "port"},
    "pgvector": {"collection", "dsn", "schema", "sample", "exact", "ef_search"},
    "qdrant": {"collection", "qdrant_path", "qdrant_url", "sample"},
    "haystack-pgvector": {"collection", "dsn"},
    "langchain-pgvector": {"collection", "dsn"},
    "llamaindex": {"collection"},
    "llamaindex-chroma": {"collection", "path", "host", "port"},
    "llamaindex-pgvector": {"collection", "dsn"},
    "haystack-qdrant": {"collection", "qdrant_path", "qdrant_url"},
    "langchain-qdrant": {"collection", "qdrant_path", "qdrant_url"},
    "llamaindex-qdrant": {"collection", "qdrant_path", "qdrant_url"},
}
assert set(_USES) == set(VIAS)


#: What an interrupted run (Ctrl-C) leaves, said with its one error line.
AFTER_INTERRUPT = (
    "run the same command again: what its collection and the embedding cache already hold "
    "is not embedded again"
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="reproduce retrieval (BEIR) or STS figures through one search path",
        description="Evaluate the contract on one task through one path: index the corpus "
        "(adding only missing ids) and search the split's queries (retrieval: nDCG, recall, "
        "MRR, MAP, precision as trec_eval computes them), or score STS pairs through the store "
        "(Spearman, Pearson). Progress on stderr; the last line on stdout is one JSON object.",
        epilog=examples(
            "ctxemb eval --data ../shared/data/scifact --path ./chroma",
            "ctxemb eval --via memory --task sts --data ../shared/data/stsbenchmark",
            "ctxemb eval --via chroma-server --data ./scifact --baseline bm25 --run-file run.trec",
        ),
    )
    p.add_argument(
        "--via",
        choices=VIAS,
        default=None,
        help=AdapterDefaults(
            "the search path: the core's exact search (memory), a Chroma collection "
            "(chroma: embedded, or the server --host names; chroma-server: a temporary server "
            "unless --host), a PostgreSQL table (pgvector, at --dsn), Haystack or LangChain over "
            "their in-memory store, Chroma or pgvector, a Qdrant collection (qdrant, at "
            "--qdrant-path or --qdrant-url) (default: qdrant when a Qdrant option is given; "
            "pgvector when --dsn or --schema is given, or %(pgvector.dsn)s is set and no Chroma "
            "option is; else chroma)",
            "pgvector",
        ),
    )
    p.add_argument("--task", choices=TASKS, default="retrieval", help="what to evaluate")
    p.add_argument(
        "--data",
        type=Path,
        help="retrieval: a BEIR folder; sts: the STS Benchmark folder or one of its csv files "
        + (
            f"(default: {_DEFAULT_DATA['retrieval']} or {_DEFAULT_DATA['sts']}, when present)"
            if _DEFAULT_DATA
            else "(required: an installed ctxemb has no evaluation data)"
        ),
    )
    p.add_argument(
        "--split",
        default="test",
        help="retrieval: qrels/SPLIT.tsv; sts: sts-SPLIT.csv in the folder (default: test)",
    )
    p.add_argument("--k", type=POSITIVE, default=100, help="documents retrieved per query")
    p.add_argument(
        "--run-file",
        type=Path,
        help="write the results: a TREC run (retrieval) or per-pair scores as TSV (sts)",
    )
    p.add_argument(
        "--baseline",
        choices=BASELINES,
        help="retrieval only: also score BM25 (bm25s) on the same qrels, printed beside",
    )
    p.add_argument(
        "--collection",
        help="the collection to index into (default: beir-DATASET-FP12 or sts-FILE-FP12)",
    )
    p.add_argument(
        "--path",
        help=AdapterDefaults(
            "an embedded Chroma folder (default %(chroma.path)s); for chroma-server without "
            "--host, the temporary server's data folder (default: a temporary folder)",
            "chroma",
        ),
    )
    p.add_argument("--host", help="a Chroma server's host (instead of --path)")
    p.add_argument(
        "--port",
        type=PORT,
        help=AdapterDefaults(
            "with --host: its port (default %(chroma.port)s); chroma-server without --host: "
            "the temporary server's port (default: a free one)",
            "chroma",
        ),
    )
    p.add_argument(
        "--dsn",
        help=AdapterDefaults(
            "--via *pgvector: the PostgreSQL connection string (default: %(pgvector.dsn)s)",
            "pgvector",
        ),
    )
    p.add_argument(
        "--schema",
        help=AdapterDefaults(
            "--via pgvector: the table's schema (default: %(pgvector.schema)s)", "pgvector"
        ),
    )
    p.add_argument(
        "--qdrant-path",
        help=AdapterDefaults(
            "--via *qdrant: a local-mode folder (default %(qdrant.qdrant_path)s)", "qdrant"
        ),
    )
    p.add_argument(
        "--qdrant-url",
        help="--via *qdrant: a server's URL (--via qdrant: its API key from "
        "$CTXEMB_QDRANT_API_KEY)",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        default=None,
        help="--via pgvector: scan every row instead of searching the HNSW index",
    )
    p.add_argument(
        "--ef-search",
        type=POSITIVE,
        default=None,
        help="--via pgvector: the HNSW index's search breadth (default 200, at least --k)",
    )
    p.add_argument(
        "--sample",
        type=COUNT,
        default=None,
        help="Chroma: stored documents re-embedded and compared when an existing collection "
        "is opened (default: the adapter's; 0: stamp and canary only)",
    )
    p.add_argument(
        "--no-cache", action="store_true", help="do not read or write the embedding cache"
    )
    p.add_argument(
        "--model",
        help=f"the model folder or name (default: {DEFAULT_MODEL}; with --url, the contract "
        "the server serves)",
    )
    remote_args(p)
    contract_args(p)
    hybrid_args(p, building=True, stored=False)


def run(args: argparse.Namespace) -> int:
    _choose_via(args)
    _check_options(args)
    check_hybrid_args(args)
    if args.hybrid and args.task != "retrieval":
        raise InvalidInputError("--hybrid is a retrieval option (--task retrieval)")
    data = _data_path(args)
    task: Any = _load_retrieval(data, args) if args.task == "retrieval" else _load_sts(data, args)
    baseline = _baseline_settings(args)

    contract = command_contract(args)
    embedding = embedder(args, contract)
    name = args.collection or _default_name(args, data, contract.fingerprint)
    with contextlib.ExitStack() as stack:
        path, store = _open_path(args, embedding, name, stack)
        stack.callback(path.close)
        if args.task == "retrieval":
            out = _retrieval(args, path, task, data, baseline, contract)
        else:
            out = _sts(args, path, task, data)
    out.update(
        via=args.via,
        store=store,
        collection=None if args.via == "memory" else name,
        fingerprint=path.fingerprint,
        model=contract.model,
    )
    print(json.dumps(out, ensure_ascii=False))
    return 0


# -- arguments and data, all checked before any store or model is touched -------------------------


def _choose_via(args: argparse.Namespace) -> None:
    """``--via`` when not given: a DSN (``--dsn``, ``--schema``, else what the pgvector adapter
    reads from the environment, ``$CTXEMB_PG_DSN``, beside no Chroma option) selects pgvector, as
    it selects the store of every other command."""
    if args.via is not None:
        return
    if args.qdrant_path is not None or args.qdrant_url is not None:
        args.via = "qdrant"  # and another store's options beside it are refused by name below
        return
    postgres = args.dsn is not None or args.schema is not None
    chroma = any(getattr(args, o) is not None for o in ("path", "host", "port"))
    if not postgres and not chroma and _from_environment("pgvector"):
        postgres = True
    args.via = "pgvector" if postgres and not chroma else "chroma"
    # Both kinds given: --via chroma, whose check below refuses --dsn by name.


def _from_environment(store: str) -> str | None:
    """What in the environment selects ``store`` (its adapter says), ``None`` without its
    adapter."""
    try:
        from_environment = getattr(store_options(store), "from_environment", None)
    except MissingDependencyError:
        return None
    return from_environment() if callable(from_environment) else None


def _check_options(args: argparse.Namespace) -> None:
    options = (
        "collection", "path", "host", "port", "sample", "dsn", "schema", "exact", "ef_search",
        "qdrant_path", "qdrant_url",
    )  # fmt: skip
    given = {o for o in options if getattr(args, o) is not None}
    unused = sorted(given - _USES[args.via])
    if unused:
        why = {
            "memory": "it keeps its index in this process",
            "haystack": "it uses Haystack's in-memory store (--via haystack-chroma: Chroma)",
            "langchain": "it uses LangChain's in-memory store (--via langchain-chroma: Chroma)",
            "llamaindex": "it uses an in-memory store (--via llamaindex-chroma: Chroma)",
        }.get(
            args.via,
            "--sample is for --via chroma, chroma-server, pgvector and qdrant; --dsn for the "
            "pgvector paths; --schema, --exact and --ef-search for --via pgvector; --path, --host "
            "and --port for Chroma; --qdrant-path and --qdrant-url for the Qdrant paths",
        )
        shown = ", ".join("--" + o.replace("_", "-") for o in unused)
        raise InvalidInputError(f"--via {args.via} does not use {shown}: {why}")
    if args.host and args.path:
        raise InvalidInputError(
            "--host and --path name two stores: give --host for a server or --path for an "
            "embedded folder"
        )
    if args.port is not None and not args.host and args.via != "chroma-server":
        raise InvalidInputError("--port needs --host (the server it belongs to)")
    if args.run_file is not None and Path(args.run_file).is_dir():
        raise InvalidInputError(f"--run-file {args.run_file} is a folder; name a file to write")
    if args.baseline and args.task != "retrieval":
        raise InvalidInputError(
            f"--baseline {args.baseline} ranks documents: it applies to --task retrieval only"
        )


def _data_path(args: argparse.Namespace) -> Path:
    if args.data is not None:
        return Path(args.data)
    default = _DEFAULT_DATA.get(args.task)
    if default is None:
        raise InvalidInputError(
            f"--data is required for --task {args.task}: the evaluation data is not installed "
            f"with ctxemb; download it and give {_DATA_IS[args.task]} with --data"
        )
    if not default.exists():
        raise InvalidInputError(
            f"--data is required for --task {args.task}: no default dataset at {default}; give "
            f"{_DATA_IS[args.task]} with --data"
        )
    return default


def _load_retrieval(data: Path, args: argparse.Namespace) -> Any:
    from ctxemb_core.eval.beir import load_beir

    dataset = load_beir(data, split=args.split)
    non_empty(dataset.corpus, data)
    for qid, text in dataset.queries.items():
        check_text(text, f"{data}: query {qid!r}")
    return dataset


def _sts_file(data: Path, split: str) -> Path:
    if data.is_dir():
        found = data / f"sts-{split}.csv"
        if not found.is_file():
            raise DataFormatError(
                f"{data} holds no sts-{split}.csv; give the STS Benchmark folder with --split "
                "train, dev or test, or the csv file itself"
            )
        return found
    if not data.is_file():
        raise DataFormatError(f"STS data not found: {data}")
    return data


def _load_sts(data: Path, args: argparse.Namespace) -> Any:
    from ctxemb_core.eval.sts import load_sts

    file = _sts_file(data, args.split)
    pairs = load_sts(file)
    check_texts(pairs.sentences1, f"{file}: sentence1")
    check_texts(pairs.sentences2, f"{file}: sentence2")
    if len(pairs) < 2:
        raise DataFormatError(f"{file} holds {len(pairs)} pair; a correlation needs at least 2")
    return pairs


def _baseline_settings(args: argparse.Namespace) -> str | None:
    """The baseline's description, which also proves its libraries are installed."""
    if args.baseline is None:
        return None
    from ctxemb_core.eval.bm25 import Bm25Settings

    return Bm25Settings().describe()


def _default_name(args: argparse.Namespace, data: Path, fingerprint: str) -> str:
    if args.task == "retrieval":
        stem = data.resolve().name
        name = f"beir-{stem}-{fingerprint[:12]}"
    else:
        stem = _sts_file(data, args.split).stem
        # sts-test.csv gives sts-test-<fp12>, not sts-sts-test-<fp12>.
        name = f"sts-{stem.removeprefix('sts-')}-{fingerprint[:12]}"
    # A folder name may hold characters a collection name may not.
    return re.sub(r"[^a-zA-Z0-9._-]+", "-", name).strip("-._")


# -- paths -----------------------------------------------------------------------------------


def _module(name: str, extra: str, via: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(
            f"--via {via} needs {name}: pip install 'ctxemb[{extra}]' ({exc})"
        ) from None


def _open_path(
    args: argparse.Namespace, embedder: Any, name: str, stack: contextlib.ExitStack
) -> tuple[Any, dict[str, Any]]:
    """The search path ``--via`` names, and where its index lives (for the JSON)."""
    via = args.via
    if via == "memory":
        from ctxemb_core.eval.paths import MemoryPath

        return MemoryPath(embedder), {"kind": "memory"}
    framework, _, store = via.partition("-")
    if framework == "chroma":
        return _chroma_path(args, embedder, name, stack)
    if "qdrant" in (framework, store):
        return _qdrant_path(args, embedder, name, stack, framework)
    if "pgvector" in (framework, store):
        return _pgvector_path(args, embedder, name, stack, framework)
    module = _module(f"ctxemb_{framework}", framework, via)
    if not hasattr(module, "eval_path"):
        raise MissingDependencyError(
            f"--via {via}: this installation's ctxemb_{framework} has no eval_path; "
            "reinstall ctxemb"
        )
    if not store:
        return module.eval_path(embedder, store="memory", collection=name), {"kind": "memory"}
    # Where the Chroma store is: the options as the Chroma adapter fills them in.
    chroma = store_filled("chroma", path=args.path, host=args.host, port=args.port)
    at: dict[str, Any] = (
        {"host": chroma.host, "port": chroma.port} if chroma.host else {"path": chroma.path}
    )
    path = module.eval_path(embedder, store=store, collection=name, **at)
    return path, {"kind": "server" if chroma.host else "embedded", **at}


def _pgvector_path(
    args: argparse.Namespace,
    embedder: Any,
    name: str,
    stack: contextlib.ExitStack,
    framework: str,
) -> tuple[Any, dict[str, Any]]:
    """A path over a PostgreSQL table: ctxemb_pgvector's own, or a framework's over it."""
    from ctxemb_core.redact import redact_dsn

    adapter = _module("ctxemb_pgvector", "pgvector", args.via)
    adapter.check_name(name)
    if not args.dsn and not _from_environment("pgvector"):
        raise InvalidInputError(
            AdapterDefaults(
                f"--via {args.via} needs --dsn (a PostgreSQL connection string) or "
                "%(pgvector.dsn)s",
                "pgvector",
            )
            % {}
        )
    # The DSN (given, or the environment's) and the schema as the pgvector adapter fills them in.
    options = store_filled("pgvector", dsn=args.dsn, schema=args.schema)
    dsn = options.dsn
    conn = adapter.connect(dsn)
    stack.callback(conn.close)
    where: dict[str, Any] = {"kind": "pgvector", "dsn": redact_dsn(dsn)}
    if framework == "pgvector":
        where["schema"] = options.schema
        search: dict[str, Any] = {"exact": bool(args.exact), "schema": where["schema"]}
        if args.sample is not None:
            search["sample"] = args.sample
        if args.ef_search is not None:
            search["ef_search"] = args.ef_search
        where["search"] = "exact" if args.exact else f"hnsw ef_search={args.ef_search or 200}"
        return adapter.eval_path(conn, name, embedder, progress=True, **search), where
    module = _module(f"ctxemb_{framework}", framework, args.via)
    return module.eval_path(embedder, store="pgvector", collection=name, dsn=dsn), where


def _qdrant_path(
    args: argparse.Namespace,
    embedder: Any,
    name: str,
    stack: contextlib.ExitStack,
    framework: str = "qdrant",
) -> tuple[Any, dict[str, Any]]:
    """A path over a Qdrant collection, ctxemb_qdrant's own or a framework's over it: local
    mode in a folder, or a server's URL."""
    from ctxemb_core.redact import redact_dsn

    adapter = _module("ctxemb_qdrant", "qdrant", args.via)
    adapter.check_name(name)  # before connecting creates a folder
    options = store_options("qdrant")
    filled = store_filled("qdrant", qdrant_path=args.qdrant_path, qdrant_url=args.qdrant_url)
    if framework != "qdrant":  # the framework's store reaches it (a folder's client is joined)
        module = _module(f"ctxemb_{framework}", framework, args.via)
        at = {"url": filled.qdrant_url} if filled.qdrant_url else {"path": filled.qdrant_path}
        path = module.eval_path(embedder, store="qdrant", collection=name, **at)
        kind = {"kind": "server", "url": redact_dsn(filled.qdrant_url)} if "url" in at else None
        return path, kind or {"kind": "local", "path": filled.qdrant_path}
    client = options.connect(filled, create=True)
    stack.callback(client.close)
    where: dict[str, Any] = (
        {"kind": "server", "url": redact_dsn(filled.qdrant_url)}
        if filled.qdrant_url
        else {"kind": "local", "path": filled.qdrant_path}
    )
    sample = {} if args.sample is None else {"sample": args.sample}
    return adapter.eval_path(client, name, embedder, progress=True, **sample), where


def _chroma_path(
    args: argparse.Namespace, embedder: Any, name: str, stack: contextlib.ExitStack
) -> tuple[Any, dict[str, Any]]:
    adapter = _module("ctxemb_chroma", "chroma", args.via)
    adapter.check_name(name)  # before connecting creates a folder or starts a server
    where: dict[str, Any]
    if args.via == "chroma-server" and not args.host:
        port, folder = stack.enter_context(_temporary_server(args.path, args.port))
        where = {"kind": "temporary server", "host": "127.0.0.1", "port": port, "path": folder}
        client = adapter.connect(host="127.0.0.1", port=port)
    else:  # the server --host names, or the embedded folder, as the Chroma adapter fills them in
        chroma = store_filled("chroma", path=args.path, host=args.host, port=args.port)
        if chroma.host:
            where = {"kind": "server", "host": chroma.host, "port": chroma.port}
            client = adapter.connect(host=chroma.host, port=chroma.port)
        else:
            where = {"kind": "embedded", "path": chroma.path}
            client = adapter.connect(path=chroma.path)
    # Closed before a temporary server stops (the stack unwinds last in, first out).
    stack.callback(client.close)
    options = {} if args.sample is None else {"sample": args.sample}
    path = adapter.eval_path(client, name, embedder, via=args.via, progress=True, **options)
    if where["kind"] == "temporary server":
        # Said once the collection has opened: a refusal stays the only line on stderr.
        _say(
            f"Chroma server on 127.0.0.1:{where['port']} (data in {where['path']}), "
            "stopped at the end"
        )
    return path, where


@contextlib.contextmanager
def _temporary_server(folder: str | None, port: int | None) -> Iterator[tuple[int, str]]:
    """``chroma run`` on 127.0.0.1 until the block ends, on error too; yields port and folder."""
    chroma = Path(sys.executable).with_name("chroma")
    if not chroma.is_file():
        raise MissingDependencyError(
            f"--via chroma-server starts `chroma run`, and there is no {chroma}: "
            "pip install 'ctxemb[chroma]', or give --host of a running server"
        )
    with contextlib.ExitStack() as stack:
        data = folder or stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxemb-chroma-"))
        port = port or _free_port()
        log = stack.enter_context(tempfile.TemporaryFile())
        proc = subprocess.Popen(
            [str(chroma), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for(proc, port, log)
            yield port, str(data)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for(proc: subprocess.Popen[bytes], port: int, log: Any) -> None:
    """Until the server's heartbeat answers. Probed over plain HTTP: a Chroma client built
    against a server still starting fails half-built and leaves its connection open."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + _SERVER_WAIT
    url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
    while True:
        if proc.poll() is not None:
            log.seek(0)
            tail = log.read().decode("utf-8", "replace").strip().splitlines()[-3:]
            raise StoreUnavailableError(
                f"the temporary Chroma server on port {port} exited with {proc.returncode} "
                f"({' / '.join(tail) or 'no output'}); give --host of a running server instead"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise StoreUnavailableError(
                f"the temporary Chroma server on port {port} did not answer within "
                f"{_SERVER_WAIT:.0f} s; give --host of a running server instead"
            )
        time.sleep(0.2)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- tasks -----------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"ctxemb eval: {message}", file=sys.stderr, flush=True)


def _retrieval(
    args: argparse.Namespace,
    path: Any,
    dataset: Any,
    data: Path,
    baseline: str | None,
    contract: Any,
) -> dict[str, Any]:
    from ctxemb_core.eval.runfiles import write_run
    from ctxemb_core.eval.runner import evaluate_retrieval, retrieval_cutoffs

    _say(
        f"retrieval on {data.name} ({args.split}): {len(dataset.corpus)} documents, "
        f"{len(dataset.queries)} queries, via {args.via}"
    )
    report = evaluate_retrieval(path, dataset, args.k)
    _say(
        f"indexed {report.indexed} now in {report.seconds['index']:.1f} s, searched in "
        f"{report.seconds['search']:.1f} s"
    )
    out: dict[str, Any] = {
        "task": "retrieval",
        "dataset": data.resolve().name,
        "split": args.split,
        "documents": report.documents,
        "indexed_now": report.indexed,
        "queries": report.queries,
        "k": report.k,
        **report.rounded(),
        "unrounded": report.metrics,
        "seconds": {s: round(v, 3) for s, v in report.seconds.items()},
    }
    columns = {args.via: report.rounded()}
    if baseline is not None:
        from ctxemb_core.eval.bm25 import bm25_run
        from ctxemb_core.eval.metrics import evaluate

        started = time.perf_counter()
        lexical = evaluate(bm25_run(dataset, args.k), dataset.qrels, ks=retrieval_cutoffs(args.k))
        rounded = {m: round(v, 5) for m, v in lexical.items()}
        columns["bm25"] = rounded
        out["baseline"] = {
            "method": "bm25",
            "settings": baseline,
            **rounded,
            "unrounded": lexical,
            "seconds": round(time.perf_counter() - started, 3),
        }
    if args.hybrid:
        out["hybrid"] = _hybrid(args, dataset, report, columns, contract)
    if args.run_file is not None:
        lines = write_run(report.run, args.run_file, tag=f"ctxemb-{args.via}")
        out["run_file"] = str(args.run_file)
        _say(f"wrote {lines} lines to {args.run_file} (TREC run format)")
    _table(columns, [m for m in _HEADLINE if m in report.metrics] or list(report.metrics))
    return out


def _hybrid(
    args: argparse.Namespace, dataset: Any, report: Any, columns: dict[str, Any], dense: Any
) -> dict[str, Any]:
    """BM25 under the options' recipe and its fusion with the dense run, scored beside it."""
    from ctxemb_core.cli.hybrid import fusion_from, lexical_from
    from ctxemb_core.eval.hybrid import hybrid_runs
    from ctxemb_core.eval.metrics import evaluate
    from ctxemb_core.eval.runner import retrieval_cutoffs
    from ctxemb_core.hybrid import HybridContract

    fusion = fusion_from(args)
    if fusion.depth > args.k:
        raise InvalidInputError(
            f"--depth {fusion.depth} is more than --k {args.k}: the dense run holds --k "
            "documents per query; give --k at least the fusion depth"
        )
    runs = hybrid_runs(dataset, report.run, lexical=lexical_from(args), fusion=fusion, k=args.k)
    contract = HybridContract(dense, runs.contract, fusion)
    cutoffs = retrieval_cutoffs(args.k)
    lexical = evaluate(runs.lexical, dataset.qrels, ks=cutoffs)
    fused = evaluate(runs.fused, dataset.qrels, ks=cutoffs)
    columns["bm25 (lexical)"] = {m: round(v, 5) for m, v in lexical.items()}
    columns["hybrid"] = {m: round(v, 5) for m, v in fused.items()}
    _say(
        f"hybrid: {runs.contract.describe()}; fusion {fusion.describe()}; fitted in "
        f"{runs.seconds['fit']:.1f} s, searched in {runs.seconds['search']:.1f} s"
    )
    return {
        "fingerprint": contract.fingerprint,
        "contract": contract.to_dict(),
        "lexical": {**{m: round(v, 5) for m, v in lexical.items()}, "unrounded": lexical},
        "fused": {**{m: round(v, 5) for m, v in fused.items()}, "unrounded": fused},
        "seconds": {s: round(v, 3) for s, v in runs.seconds.items()},
    }


def _sts(args: argparse.Namespace, path: Any, pairs: Any, data: Path) -> dict[str, Any]:
    from ctxemb_core.eval.runfiles import write_pair_scores
    from ctxemb_core.eval.runner import evaluate_sts

    file = _sts_file(data, args.split)
    _say(f"sts on {file.name}: {len(pairs)} pairs, via {args.via}")
    report = evaluate_sts(path, pairs)
    _say(f"scored in {report.seconds['score']:.1f} s")
    out: dict[str, Any] = {
        "task": "sts",
        "dataset": file.parent.name if data.is_dir() else file.name,
        "file": file.name,
        "pairs": report.pairs,
        "spearman": round(report.spearman, 5),
        "pearson": round(report.pearson, 5),
        "unrounded": report.metrics(),
        "seconds": {s: round(v, 3) for s, v in report.seconds.items()},
    }
    if args.run_file is not None:
        write_pair_scores(
            args.run_file, report.gold, report.scores, pairs.sentences1, pairs.sentences2
        )
        out["run_file"] = str(args.run_file)
        _say(f"wrote {report.pairs} pair scores to {args.run_file} (TSV)")
    _table({args.via: {"spearman": out["spearman"], "pearson": out["pearson"]}})
    return out


def _table(columns: dict[str, dict[str, float]], rows: list[str] | None = None) -> None:
    """The figures as a small table on stdout, one column per run (dense, then the baseline)."""
    names = list(columns)
    rows = rows or list(next(iter(columns.values())))
    width = max(len(r) for r in rows)
    print(f"{'':<{width}}  " + "  ".join(f"{n:>10}" for n in names))
    for r in rows:
        print(f"{r:<{width}}  " + "  ".join(f"{columns[n][r]:>10.5f}" for n in names))
