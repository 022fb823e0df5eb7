"""The ``ctxemb`` command.

Store commands (Chroma, …) are reached by name and loaded on demand, so this module imports no
integration at module level.

A user's mistake never ends in a traceback: every one is a :class:`CtxembError` (argparse's own
usage errors included), printed as one ``ctxemb: error:`` line on stderr with exit code 2, and is
found before the store is touched wherever the inputs allow it. A failed ``verify`` exits 1 and an
interrupt 130. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ctxemb_core import demo as demo_data
from ctxemb_core._validate import check_text, check_texts
from ctxemb_core.contract import EmbeddingContract, Pooling, Precision, Quantization
from ctxemb_core.errors import (
    CtxembError,
    DataFormatError,
    InvalidInputError,
    MissingDependencyError,
)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
#: The stores the CLI has adapters for; each is the import package ``ctxemb_<store>``.
STORES = ("chroma",)
INTERRUPTED = 130  # the shell's code for a process ended by SIGINT


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are :class:`InvalidInputError` naming the argument.

    argparse would print the usage and exit; raising instead lets :func:`main` report every user
    mistake the same way (one line, exit 2) and lets in-process callers catch it.
    """

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


def _choices(values: Sequence[object]) -> str:
    return ", ".join(str(v) for v in values)


def _contract_args(p: argparse.ArgumentParser) -> None:
    from ctxemb_core.resolve import FAMILY_PRESETS

    # Contract values are checked by contract_for alone (one validator, whose errors list the
    # valid values): the CLI only parses them and passes the user's value through unchanged.
    p.add_argument("--pooling", help=_choices(list(Pooling)))
    p.add_argument("--name", help="identity to record for a local folder (default: its name)")
    p.add_argument("--family", help=f"prefix preset: {_choices(list(FAMILY_PRESETS))}")
    p.add_argument("--query-prefix")
    p.add_argument("--document-prefix")
    p.add_argument("--truncate-dim", type=int, help="Matryoshka prefix length (≥ 1)")
    p.add_argument("--max-tokens", type=int, help="tokenizer truncation length (≥ 1)")
    p.add_argument("--precision", help=_choices(list(Precision)))
    p.add_argument(
        "--quantization", help=f"{_choices(list(Quantization))} (int8 weights, onnx backend)"
    )
    p.add_argument(
        "--normalize", action=argparse.BooleanOptionalAction, default=None, help="L2 normalise"
    )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from ctxemb_core.resolve import CONTRACT_OVERRIDES

    keys = (*CONTRACT_OVERRIDES, "name", "family")
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


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


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ctxemb",
        description="Contract-aware embeddings: pin the recipe, stamp the index, refuse mixes.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "inspect",
        help="print the contract derived from a model folder or name, as JSON",
        description="Derive a model's contract (pooling, prefixes, normalisation, digest) and "
        "print it as JSON with its fingerprint.",
    )
    p.add_argument("model", help=f"a folder path or an offline name such as {DEFAULT_MODEL}")
    _contract_args(p)
    p = sub.add_parser(
        "demo",
        help="index a small corpus into a stamped Chroma collection, query it, show mismatches",
        description="Index the example corpus with the bundled model into an embedded, "
        "contract-stamped Chroma collection, run the example queries, then show the collection "
        "refusing embedders under other contracts.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--corpus", type=Path, default=demo_data.corpus_path())
    p.add_argument("--queries", type=Path, default=demo_data.queries_path())
    p.add_argument("--top-k", type=_POSITIVE, default=3)
    p.add_argument("--collection", default="ctxemb-demo")
    p.add_argument("--store", default="chroma", choices=STORES)
    p.add_argument("--path", default="./ctxemb-demo-chroma", help="embedded store folder")
    p.add_argument("--host", help=argparse.SUPPRESS)
    p.add_argument("--port", type=_PORT, default=8000, help=argparse.SUPPRESS)

    p = sub.add_parser(
        "index",
        help="embed a BEIR folder or a JSONL corpus into a stamped collection",
        description="Embed documents ({_id, title, text} JSONL, or a BEIR folder's corpus) into "
        "a collection stamped with the contract. A second run adds only the missing ids.",
    )
    p.add_argument("data", type=Path, help="a BEIR folder or a .jsonl(.gz) file")
    _store_args(p)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--batch-size", type=_POSITIVE, default=512, help="documents per write (≥ 1)")
    _open_sample_arg(p)
    _contract_args(p)

    p = sub.add_parser(
        "query",
        help="query a stamped collection",
        description="Embed the query under the collection's contract (or the one given, which "
        "must match) and print the nearest documents.",
    )
    p.add_argument("text", nargs="+", help="one or more query texts")
    _store_args(p)
    p.add_argument("-k", "--top-k", type=_POSITIVE, default=5, help="results per query (≥ 1)")
    p.add_argument("--model", help="query with this model's contract (must match the index)")
    p.add_argument("--json", action="store_true", help="print JSON lines")
    _rerank_args(p)
    _open_sample_arg(p)
    _contract_args(p)

    p = sub.add_parser(
        "verify",
        help="check a collection against a contract and print a report",
        description=_VERIFY_DESCRIPTION,
    )
    _store_args(p)
    p.add_argument("--model", help="the caller's model (default: the collection's own contract)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--sample",
        type=_COUNT,
        default=32,
        help="stored documents to re-embed and compare (default 32; 0: stamp and canary only)",
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
    )
    _store_args(p)
    p.add_argument("--to", required=True, help="name of the new collection")
    p.add_argument("--model", help="the target model (default: the source's model)")
    p.add_argument("--batch-size", type=_POSITIVE, default=256, help="documents per write (≥ 1)")
    _open_sample_arg(p)
    _contract_args(p)

    from ctxemb_core import _cli_detect, _cli_eval

    _cli_eval.add_parser(sub)
    _cli_detect.add_parser(sub)
    return parser


def _store_args(p: argparse.ArgumentParser, *, collection_required: bool = True) -> None:
    p.add_argument("--collection", required=collection_required, help="collection name")
    p.add_argument(
        "--store", default="chroma", choices=STORES, help="the store's adapter (default: chroma)"
    )
    p.add_argument("--path", default="./chroma", help="embedded store folder (default ./chroma)")
    p.add_argument("--host", help="a store server's host (instead of --path)")
    p.add_argument("--port", type=_PORT, default=8000)
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
        help="first-stage candidates to rerank (≥ --top-k; default 50)",
    )
    group.add_argument(
        "--activation",
        choices=[a.value for a in Activation],
        help="the cross-encoder's score activation (needed for a plain transformers folder; "
        "a sentence-transformers CrossEncoder folder says its own)",
    )
    group.add_argument("--threshold", type=float, help="keep results scoring at least this")


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


def _require_store(args: argparse.Namespace) -> None:
    """Refuse a ``--path`` with no store for a command that reads one, before connecting.

    Connecting would create the folder, empty, only to report that nothing is in it. A folder
    that cannot be used at all (a file, not writable) is the adapter's ``connect`` to refuse.

    Raises:
        InvalidInputError: there is no folder at ``--path`` (and no ``--host``).
    """
    if not args.host and not Path(args.path).expanduser().is_dir():
        raise InvalidInputError(
            f"--path {args.path}: no store there; pass the folder of an existing store (or "
            "--host of a server), or create one with ctxemb index"
        )


def _adapter(args: argparse.Namespace) -> tuple[Any, Any]:
    """The store's adapter module, loaded by name only now, and a client for it."""
    name = f"ctxemb_{args.store}"
    try:
        adapter = importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {args.store!r} store needs its adapter: "
            f"pip install 'ctxemb[{args.store}]' ({exc})"
        ) from None
    for option in ("collection", "to"):
        if getattr(args, option, None) is not None:
            adapter.check_name(getattr(args, option))  # before connecting creates a store
    return adapter, adapter.connect(path=args.path, host=args.host, port=args.port)


def _given_contract(args: argparse.Namespace) -> EmbeddingContract | None:
    """The contract that ``--model`` names, resolved before any store is opened."""
    from ctxemb_core.resolve import contract_for

    return contract_for(args.model, **_overrides(args)) if args.model else None


def _caller_contract(
    args: argparse.Namespace, given: EmbeddingContract | None, adapter: Any, client: Any
) -> EmbeddingContract:
    """The contract given on the command line, else the collection's own (with the overrides)."""
    from ctxemb_core.resolve import contract_for

    if given is not None:
        return given
    stamped: EmbeddingContract = adapter.stamped_contract(client, args.collection)
    overrides = _overrides(args)
    if not overrides:
        return stamped
    return contract_for(stamped.model, **overrides)


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


def _index_missing(collection: Any, corpus: dict[str, dict[str, str]], batch: int) -> int:
    """Add the documents whose ids the collection lacks; returns how many were added."""
    from tqdm.auto import tqdm

    from ctxemb_core.eval.beir import document_text

    have = collection.ids()
    todo = [i for i in corpus if i not in have]
    added = 0
    with tqdm(total=len(todo), unit="doc", desc="indexing", disable=not todo) as bar:
        for start in range(0, len(todo), batch):
            ids = todo[start : start + batch]
            # Another process may be indexing the same corpus: ids it added meanwhile are skipped.
            added += collection.add_missing(ids, [document_text(corpus[i]) for i in ids])
            bar.update(len(ids))
    return added


def _index(args: argparse.Namespace) -> int:
    from ctxemb_core.resolve import contract_for

    corpus = _load_documents(args.data)
    contract = contract_for(args.model, **_overrides(args))
    embedder = _embedder(args, contract)
    adapter, client = _adapter(args)
    collection = adapter.open_collection(client, args.collection, embedder, **_open_kwargs(args))
    added = _index_missing(collection, corpus, args.batch_size)
    print(
        f"{args.collection}: {added} added, {collection.count()} documents, "
        f"contract {contract.describe()}"
    )
    return 0


def _query(args: argparse.Namespace) -> int:
    # A command line may carry bytes that are not UTF-8 (decoded as lone surrogates).
    check_texts(args.text, "query text")
    given = _given_contract(args)
    # A reranker that cannot be built is refused before the store is read.
    reranker = _reranker(args, None) if args.rerank not in (None, "maxsim") else None
    _require_store(args)
    adapter, client = _adapter(args)
    contract = _caller_contract(args, given, adapter, client)
    collection = adapter.open_collection(
        client, args.collection, contract, create=False, **_open_kwargs(args)
    )
    if args.rerank is not None:
        reranker = reranker or _reranker(args, collection.contract)
        return _two_stage(args, adapter, collection, reranker)
    result = collection.query(args.text, n_results=args.top_k)
    for q, ids, dists, docs in zip(
        args.text, result["ids"], result["distances"], result["documents"], strict=True
    ):
        if args.json:
            print(json.dumps({"query": q, "ids": ids, "distances": dists}, ensure_ascii=False))
            continue
        print(f"query {q!r}")
        for i, d, doc in zip(ids, dists, docs, strict=True):
            print(f"  {i:<20} {d:8.4f}  {(doc or '')[:70]}")
    return 0


def _two_stage(args: argparse.Namespace, adapter: Any, collection: Any, reranker: Any) -> int:
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
                "first_stage": [h.first_score for h in result.hits],
                "index_fingerprint": result.index_fingerprint,
                "reranker_fingerprint": result.reranker_fingerprint,
                "rerank_ms": round(result.rerank_seconds * 1000, 2),
            }
            print(json.dumps(row, ensure_ascii=False))
            continue
        print(f"query {q!r}  reranked {result.shortlisted} by {reranker.contract.describe()}")
        for h in result.hits:
            print(
                f"  {h.id:<20} {h.score:9.4f}  (first stage #{h.first_rank + 1}, "
                f"{h.first_score:.4f})  {h.text[:60]}"
            )
    return 0


def _verify(args: argparse.Namespace) -> int:
    given = _given_contract(args)
    _require_store(args)
    adapter, client = _adapter(args)
    contract = _caller_contract(args, given, adapter, client)
    stored = adapter.stored_collection(client, args.collection)
    # --all reads every record in pages, with a progress bar on stderr (stdout stays the JSON).
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
    from ctxemb_core.resolve import contract_for

    given = _given_contract(args)
    if args.to == args.collection:
        raise InvalidInputError(
            f"--to {args.to!r} is the source collection; migrate writes a new collection and "
            "never modifies the source: pass another name"
        )
    _require_store(args)
    adapter, client = _adapter(args)
    source_contract = adapter.stamped_contract(client, args.collection)
    source = adapter.open_collection(
        client, args.collection, source_contract, create=False, **_open_kwargs(args)
    )
    target = given or contract_for(source_contract.model, **_overrides(args))
    done = adapter.migrate(source, _embedder(args, target), args.to, batch_size=args.batch_size)
    print(f"{args.to}: {done.count()} documents under {target.describe()}")
    print(f"changed: {source_contract.diff(target)}")
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
    from ctxemb_core import Embedder, contract_for
    from ctxemb_core.errors import ContractMismatchError

    corpus = _load_documents(args.corpus)
    queries = _load_queries(args.queries)
    contract = contract_for(args.model)
    adapter, client = _adapter(args)
    print(f"contract   {contract.describe()}")
    collection = adapter.open_collection(client, args.collection, Embedder(contract))
    added = _index_missing(collection, corpus, 512)
    print(
        f"collection {args.collection!r} in {args.path}: {added} documents added, "
        f"{collection.count()} in all, stamped {contract.fingerprint[:12]}"
    )
    result = collection.query(queries, n_results=args.top_k)
    for q, ids, dists in zip(queries, result["ids"], result["distances"], strict=True):
        hits = ", ".join(f"{i} ({1 - d:.3f})" for i, d in zip(ids, dists, strict=True))
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
            print("  " + str(exc).replace("\n", "\n  "))
        else:  # pragma: no cover - the guard failing is the one thing the demo must not show
            print(f"- {label}: NOT refused")
            return 1
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
}


def _error(message: str) -> int:
    """Print one ``ctxemb: error:`` line (a multi-line message joined) and return exit code 2."""
    parts = [part.strip() for part in message.splitlines() if part.strip()]
    line = parts[0] if parts else "unknown error"
    for part in parts[1:]:
        line += (" " if line.endswith((".", ":", ";")) else "; ") + part
    print(f"ctxemb: error: {line}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ctxemb`` console script.

    Returns:
        0 on success, 1 when ``verify`` finds a failed check, 2 for a user's mistake (one
        ``ctxemb: error:`` line on stderr, nothing changed), 130 when interrupted.
    """
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit as exc:  # --help: argparse printed it and asks to exit
            return exc.code if isinstance(exc.code, int) else 0
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            return _HANDLERS[args.command](args)
    except CtxembError as exc:
        return _error(f"{type(exc).__name__}: {exc}")
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
