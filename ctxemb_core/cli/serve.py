"""``ctxemb serve``: one contract over HTTP (OpenAI's embeddings API), its stamp open to clients;
with ``--also``, several contracts on one server, one model id each."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ctxemb_core.cli.common import (
    INTERRUPTED,
    POSITIVE,
    contract_args,
    contract_file,
    examples,
    overrides,
)
from ctxemb_core.errors import CtxembError, InvalidInputError

_DESCRIPTION = """\
Serve one contract's embeddings over HTTP, OpenAI-compatible: POST /v1/embeddings (input,
model, encoding_format float|base64; usage with real token counts), GET /v1/models, GET
/v1/contract (the contract, its fingerprint and the stamp: probes and canary vectors), GET
/health and GET /metrics (Prometheus). Every response carries the ctxemb-fingerprint and
ctxemb-instance headers. A request names its role by input_type (query|document) or by the
model id (MODEL:query, MODEL:document); a contract whose two sides differ refuses a request
that names neither. The model id is the contract's model name (--name sets it).
--also serves more contracts beside the first, each under its own model id (both sides of
an upgrade on one server); a request must then name its model, and GET /v1/contract?model=ID
gives each model's contract. Concurrent requests are gathered into batches (--max-wait-ms).
Embedder(contract, url=...) and the adapters' url= options embed through it and refuse it when
it serves another contract or its canary does not reproduce. Binds 127.0.0.1 unless --host
says otherwise; SIGTERM and Ctrl-C finish the requests in flight before it exits."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a contract over HTTP (OpenAI-compatible embeddings, stamped responses)",
        description=_DESCRIPTION,
        epilog=examples(
            "ctxemb serve sentence-transformers/all-MiniLM-L6-v2 --port 8080",
            "ctxemb serve ./minilm-export --port 8080          (an export: no torch needed)",
            "ctxemb serve contract.json --host 0.0.0.0 --port 8080",
            "ctxemb serve ./e5-small --family e5 --name e5-small",
            "ctxemb serve minilm.json --also minilm-256=minilm-256.json   (two contracts)",
        ),
    )
    p.add_argument(
        "model",
        metavar="MODEL|EXPORT|CONTRACT.json",
        help="a model folder or offline name (with the contract options below), an export "
        "folder (ctxemb export), or a contract JSON file",
    )
    p.add_argument(
        "--also",
        action="append",
        metavar="[ID=]MODEL|EXPORT|CONTRACT.json",
        help="one more contract to serve beside the first, under the model id ID (default: its "
        "contract's model name); repeatable. A model here takes its folder's contract: the "
        "contract options apply to the first only",
    )
    p.add_argument("--host", default="127.0.0.1", help="the interface to listen on")
    p.add_argument("--port", type=int, default=8080, help="the port (0: any free port)")
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long a request waits for others to share its batch",
    )
    p.add_argument("--max-inputs", type=POSITIVE, default=2048, help="texts per request, at most")
    p.add_argument(
        "--max-body-mb", type=float, default=16.0, help="request body size in MiB, at most"
    )
    p.add_argument(
        "--batch-tokens",
        type=POSITIVE,
        default=16384,
        help="tokens gathered into one batch before it is embedded",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "onnx", "torch", "static"],
        default="auto",
        help="the encoder backend",
    )
    p.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        default="info",
        help="uvicorn's log level",
    )
    contract_args(p)


def _embedder(args: argparse.Namespace) -> Any:
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.export import is_export
    from ctxemb_core.resolve import contract_for

    given = overrides(args)
    source = Path(args.model).expanduser()
    if source.is_file() or is_export(source):
        if given:
            raise InvalidInputError(
                f"contract options ({', '.join(sorted(given))}) apply to a model, not to the "
                f"contract of {args.model}; edit the contract, or serve the model instead"
            )
        if source.is_file():
            contract = contract_file(source)
            return Embedder(contract, backend=args.backend)
        return Embedder.from_export(source, backend=args.backend)
    return Embedder(contract_for(args.model, **given), backend=args.backend)


def _also(spec: str, backend: str) -> tuple[str | None, Any]:
    """The model id (``None``: the contract's model name) and the embedder of one ``--also``."""
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.export import is_export
    from ctxemb_core.resolve import contract_for

    name, given = None, spec
    if "=" in spec and not Path(spec).expanduser().exists():
        name, given = spec.split("=", 1)
    try:
        if name is not None:
            from ctxemb_core.serve.served import check_name

            check_name(name)
        source = Path(given).expanduser()
        if source.is_file():
            contract = contract_file(source)
            return name, Embedder(contract, backend=backend)
        if is_export(source):
            return name, Embedder.from_export(source, backend=backend)
        return name, Embedder(contract_for(given), backend=backend)
    except CtxembError as exc:
        raise _naming(exc, f"--also {spec}: ") from None


def _naming(exc: CtxembError, prefix: str) -> CtxembError:
    """``exc`` with ``prefix`` before its message (for Python and for the command line)."""
    if exc.args and isinstance(exc.args[0], str):
        exc.args = (prefix + exc.args[0], *exc.args[1:])
    cli = getattr(exc, "_cli", None)
    if isinstance(cli, str):
        exc._cli = prefix + cli
    return exc


def _models(first: Any, also: list[str], backend: str) -> dict[str, Any]:
    """Every model to serve by its id: the first under its contract's model name, then each
    ``--also``; two under one id are refused, naming the option that gives another."""
    models = {first.contract.model: first}
    for spec in also:
        name, embedder = _also(spec, backend)
        key = name or embedder.contract.model
        if key in models:
            raise InvalidInputError(
                f"--also {spec}: the model id {key!r} is served already; give this contract "
                f"its own: --also ID={spec.split('=', 1)[-1] if name else spec}"
            )
        models[key] = embedder
    return models


def run(args: argparse.Namespace) -> int:
    from ctxemb_core.serve import ServeLimits, serve

    if not args.max_body_mb > 0:
        raise InvalidInputError(f"--max-body-mb must be above 0, got {args.max_body_mb}")
    limits = ServeLimits(
        max_inputs=args.max_inputs,
        max_body_bytes=int(args.max_body_mb * 1024 * 1024),
        max_wait_ms=args.max_wait_ms,
        batch_tokens=args.batch_tokens,
        # A request of --max-inputs texts must fit the idle queue (ServeLimits refuses less).
        max_queued=max(ServeLimits.max_queued, args.max_inputs),
    )
    embedder = _embedder(args)
    served: Any = _models(embedder, args.also, args.backend) if args.also else embedder

    def announce(service: Any, host: str, port: int) -> None:
        if len(service.models) > 1:
            print(f"ctxemb serve: {len(service.models)} contracts, instance {service.instance}")
            for name, model in service.models.items():
                c = model.contract
                print(
                    f"  {name}: {c.describe()}\n"
                    f"    fingerprint {c.fingerprint[:12]}  backend {model.embedder.backend}"
                    + ("" if model.symmetric else "  (the role is required: the sides differ)")
                )
            print(
                f"  http://{host}:{port}/v1  models: {', '.join(service.model_ids)} (a request "
                "names its model)",
                flush=True,
            )
            return
        c = service.contract
        print(
            f"ctxemb serve: {c.describe()}\n"
            f"  fingerprint {c.fingerprint[:12]}  instance {service.instance}  backend "
            f"{embedder.backend}\n"
            f"  http://{host}:{port}/v1  models: {', '.join(service.model_ids)}"
            + ("" if service.symmetric else "  (the role is required: the sides differ)"),
            flush=True,
        )

    try:
        serve(
            served,
            host=args.host,
            port=args.port,
            limits=limits,
            log_level=args.log_level,
            announce=announce,
        )
    except KeyboardInterrupt:
        print("ctxemb serve: stopped (Ctrl-C) after the requests in flight", file=sys.stderr)
        return INTERRUPTED
    print("ctxemb serve: stopped after the requests in flight", file=sys.stderr)
    return 0
