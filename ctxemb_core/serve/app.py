"""The ASGI application of ``ctxemb serve``: OpenAI's embeddings API under one contract, or
under several, one model id each (both sides of an upgrade on one server).

Routes:

* ``POST /v1/embeddings`` — OpenAI-compatible (``input``, ``model``, ``encoding_format``
  ``float``/``base64``, ``dimensions`` equal to the contract's, ``usage`` with real token
  counts; ``model`` is the served name or ``ctxemb:<recipe>``, the id of the contract's
  recipe under any name, which ctxemb's own client sends). The role comes from ``input_type``
  (``query``/``document``) or the model id (``<model>:query``/``<model>:document``); a
  contract whose two sides differ refuses a request that names neither. ``"precision":
  "float32"`` (a ctxemb field) asks for the contract's vectors before its precision step, as
  remote encoders do.
* ``GET /v1/models`` — the model id and its two role ids.
* ``GET /v1/contract`` — the contract, its fingerprint, the stamp (probes and canary vectors)
  and the instance id.
* ``GET /health``, ``GET /metrics`` (Prometheus text).

With several models served, every route that names a model works per model:
``/v1/embeddings`` by its ``model``, ``/v1/contract?model=ID``, ``/v1/models`` lists them all,
``/metrics`` labels each model's series ``model="ID"``, and ``/health`` gives each model's
fingerprint. A request that names no model is refused (400, ``missing_model``, listing the
served ids), never given a default; one naming an unknown model is a 404 (``model_not_found``)
listing them too. A response about one model carries that model's fingerprint header; one
about none (health, metrics, a request refused before its model is known) carries only the
instance header.

The three API routes answer without the ``/v1`` too (``/embeddings``, ``/models``,
``/contract``): a client's URL is a base to which ``/embeddings`` is appended, as the
``openai`` client does, so ``http://host:port`` and ``http://host:port/v1`` both reach them.

Every response carries ``ctxemb-fingerprint`` and ``ctxemb-instance`` (a new id per process), so
a client tells a restarted or replaced server from the one it verified. Errors are JSON in
OpenAI's shape (``{"error": {"message", "type", "code"}}``) with ctxemb's message; no input ends
the process.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxemb_core.contract import Role
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.remote import INSTANCE_HEADER
from ctxemb_core.serve.batcher import Arrivals, Batcher, BusyError
from ctxemb_core.serve.limits import ServeLimits
from ctxemb_core.serve.metrics import Metrics
from ctxemb_core.serve.served import ServedModel, check_models, check_name
from ctxemb_core.validate import check_texts

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract
    from ctxemb_core.embedder import Embedder
    from ctxemb_core.stamp import IndexStamp

__all__ = ["EmbeddingService"]

log = logging.getLogger("ctxemb.serve")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_ROLE_FIELDS = {"query": Role.QUERY, "document": Role.DOCUMENT}
# Where a request's resolved model is kept in its ASGI scope, for its response's headers.
_MODEL_KEY = "ctxemb.model"
_REQUEST_KEYS = {"input", "model", "encoding_format", "dimensions", "input_type", "user"}


class HttpError(Exception):
    """A refusal: the status, OpenAI's error type and code, and ctxemb's message."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param

    @property
    def kind(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"


class EmbeddingService:
    """One contract's embeddings over HTTP (an ASGI 3 application), or several contracts',
    one model id each.

    Args:
        embedder: the contract's embedder; or a mapping of model ids to embedders, one per
            contract served (a server of several contracts: both sides of an upgrade). The
            service embeds on one worker thread, whatever the number of models.
        name: the model id clients send (default: the contract's model name); with one
            embedder only.
        limits: what a request may hold and how requests are batched (each model has its own
            queue and batches under these limits).

    Example:
        >>> service = EmbeddingService({"minilm": fp32, "minilm-256": cut})  # doctest: +SKIP
        >>> service.models["minilm-256"].contract.truncate_dim  # doctest: +SKIP
        256
    """

    def __init__(
        self,
        embedder: Embedder | Mapping[str, Embedder],
        *,
        name: str | None = None,
        limits: ServeLimits | None = None,
    ) -> None:
        if isinstance(embedder, Mapping):
            if name is not None:
                raise InvalidInputError(
                    "name= names the one model of a single embedder; with several, the "
                    "mapping's keys are their model ids"
                )
            given = dict(embedder)
            check_models(given)
        else:
            check_models({"": embedder}, named=False)  # only its embedder is checked here
            if name is not None:
                check_name(name)
            given = {name or embedder.contract.model: embedder}
        self.limits = limits or ServeLimits()
        self.instance = uuid.uuid4().hex
        self.metrics = Metrics(self.instance, {n: e.contract.fingerprint for n, e in given.items()})
        # One worker thread for every model: the CPU runs one batch at a time.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="ctxemb-embed")
        arrivals = Arrivals()
        #: The models served, by model id, in the order given.
        self.models: dict[str, ServedModel] = {
            n: ServedModel.build(
                n,
                e,
                Batcher(
                    e,
                    self.limits,
                    self.metrics.of(n),
                    executor=self._executor,
                    arrivals=arrivals,
                ),
                self.instance,
            )
            for n, e in given.items()
        }
        self._arrivals = arrivals
        self._single = next(iter(self.models.values())) if len(self.models) == 1 else None
        #: Every id a request may name (each model's three, and its recipe's), to its model
        #: and the role the id names.
        self._ids: dict[str, tuple[ServedModel, Role | None]] = {
            i: (m, role) for m in self.models.values() for i, role in m.ids().items()
        }
        self._instance_header = (INSTANCE_HEADER.encode(), self.instance.encode())
        self._routes: dict[str, dict[str, Callable[[Scope, Receive], Awaitable[Any]]]] = {
            "/v1/embeddings": {"POST": self._embeddings},
            "/v1/models": {"GET": self._models},
            "/v1/contract": {"GET": self._contract},
            "/health": {"GET": self._health},
            "/metrics": {"GET": self._metrics},
        }
        # The API without its /v1 too: a client's URL is a base that /embeddings is appended
        # to (the openai client's convention), given with or without the /v1.
        for path in ("/embeddings", "/models", "/contract"):
            self._routes[path] = self._routes["/v1" + path]

    # -- the one model of a single-model server ----------------------------------------------

    def _the_model(self) -> ServedModel:
        if self._single is None:
            raise InvalidInputError(
                f"this service serves {len(self.models)} models "
                f"({', '.join(repr(n) for n in self.models)}): ask service.models[ID]"
            )
        return self._single

    @property
    def embedder(self) -> Embedder:
        """The embedder of a single-model service (``models[ID].embedder`` with several)."""
        return self._the_model().embedder

    @property
    def contract(self) -> EmbeddingContract:
        """The contract of a single-model service (``models[ID].contract`` with several)."""
        return self._the_model().contract

    @property
    def name(self) -> str:
        """The model id of a single-model service."""
        return self._the_model().name

    @property
    def stamp(self) -> IndexStamp:
        """The stamp of a single-model service's contract."""
        return self._the_model().stamp

    @property
    def symmetric(self) -> bool:
        """Whether a single-model service's two roles give the same vectors."""
        return self._the_model().symmetric

    @property
    def batcher(self) -> Batcher:
        """The batcher of a single-model service (``models[ID].batcher`` with several)."""
        return self._the_model().batcher

    @property
    def model_ids(self) -> tuple[str, ...]:
        """The ids a request may name: each model, and each model for each role."""
        return tuple(i for m in self.models.values() for i in m.model_ids)

    # -- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        route = self._routes.get(path)
        label = path if route is not None else "other"
        try:
            if route is None:
                raise HttpError(404, f"no route {path}; see GET /v1/models", code="not_found")
            handler = route.get(scope["method"])
            if handler is None:
                raise HttpError(
                    405,
                    f"{path} answers {', '.join(route)}, not {scope['method']}",
                    code="method_not_allowed",
                )
            result = await handler(scope, receive)
        except HttpError as exc:
            self.metrics.error(exc.code)
            self.metrics.request(label, exc.status)
            body = {"message": str(exc), "type": exc.kind, "code": exc.code, "param": exc.param}
            extra = [(b"retry-after", b"1")] if exc.status == 503 else []
            await self._send(send, scope, exc.status, _json({"error": body}), extra=extra)
            return
        except Exception:  # never let one request end the process
            log.exception("ctxemb serve: %s %s failed", scope.get("method"), path)
            self.metrics.error("internal")
            self.metrics.request(label, 500)
            body = {"message": "internal error; see the server's log", "type": "server_error"}
            await self._send(send, scope, 500, _json({"error": {**body, "code": "internal"}}))
            return
        self.metrics.request(label, 200)
        if isinstance(result, str):
            await self._send(send, scope, 200, result.encode(), ctype=b"text/plain; version=0.0.4")
        else:
            await self._send(send, scope, 200, result)

    async def _send(
        self,
        send: Send,
        scope: Scope,
        status: int,
        body: bytes,
        *,
        ctype: bytes = b"application/json",
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        # The fingerprint of the model the request was about (a single-model server's always).
        model: ServedModel | None = scope.get(_MODEL_KEY, self._single)
        headers = [
            (b"content-type", ctype),
            (b"content-length", str(len(body)).encode()),
            *([model.header] if model is not None else []),
            self._instance_header,
            *(extra or []),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for model in self.models.values():
                    await model.batcher.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for model in self.models.values():
                    await model.batcher.stop()
                self._executor.shutdown(wait=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.limits.max_body_bytes
        for key, value in scope.get("headers", []):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise HttpError(
                        400, "Content-Length is not a number", code="bad_length"
                    ) from None
                if declared > limit:
                    raise HttpError(413, _too_large(declared, limit), code="body_too_large")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise HttpError(400, "the client went away mid-request", code="disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise HttpError(413, _too_large(size, limit), code="body_too_large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    # -- routes ------------------------------------------------------------------------------

    async def _health(self, scope: Scope, receive: Receive) -> bytes:
        if self._single is not None:
            fingerprint = self._single.contract.fingerprint
            return _json({"status": "ok", "fingerprint": fingerprint, "instance": self.instance})
        models = {n: m.contract.fingerprint for n, m in self.models.items()}
        return _json({"status": "ok", "instance": self.instance, "models": models})

    async def _metrics(self, scope: Scope, receive: Receive) -> str:
        return self.metrics.render()

    async def _contract(self, scope: Scope, receive: Receive) -> bytes:
        if self._single is not None:
            return self._single.contract_body
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        asked = query.get("model", [None])[-1]
        model, _ = self._resolve(asked, scope)
        return model.contract_body

    async def _models(self, scope: Scope, receive: Receive) -> bytes:
        roles = (None, "query", "document")
        data = [
            {"id": i, "object": "model", "owned_by": "ctxemb", "ctxemb_role": r}
            for m in self.models.values()
            for i, r in zip(m.model_ids, roles, strict=True)
        ]
        return _json({"object": "list", "data": data})

    async def _embeddings(self, scope: Scope, receive: Receive) -> bytes:
        # Counted as arriving until queued, so a batch being gathered waits for it.
        self._arrivals.count += 1
        try:
            payload, texts, model, role, encoding, raw_vectors = await self._request(scope, receive)
            # Tokenized once: the usage counts these tokens, and the batch embeds them.
            tokenized = model.embedder.tokenize(texts, role)
        except BaseException:
            self._arrivals.count -= 1
            raise
        tokens = int(tokenized.lengths.sum())
        try:
            vectors = await model.batcher.embed(tokenized, role, tokens, raw_vectors)
        except BusyError as exc:
            raise HttpError(503, str(exc), code="busy") from None
        except InvalidInputError as exc:
            raise HttpError(400, str(exc), code="invalid_input") from None
        self.metrics.of(model.name).embedded(role.value, len(texts), tokens)
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(v, encoding)}
            for i, v in enumerate(vectors)
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json(
            {
                "object": "list",
                "data": data,
                "model": payload["model"],
                "usage": usage,
            }
        )

    async def _request(
        self, scope: Scope, receive: Receive
    ) -> tuple[dict[str, Any], list[str], ServedModel, Role, str, bool]:
        """The checked request: (payload, texts, model, role, encoding, raw vectors asked)."""
        raw = await self._body(scope, receive)
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            raise HttpError(400, "the request body is not JSON", code="invalid_json") from None
        if not isinstance(payload, dict):
            raise HttpError(400, "the request body must be a JSON object", code="invalid_json")
        raw_vectors = _precision(payload.pop("precision", None))
        unknown = sorted(set(payload) - _REQUEST_KEYS)
        if unknown:
            raise HttpError(
                400,
                f"unknown fields {unknown}; an embeddings request takes "
                f"{sorted(_REQUEST_KEYS | {'precision'})}",
                code="unknown_field",
            )
        texts = self._texts(payload.get("input"))
        model, by_model = self._resolve(payload.get("model"), scope)
        role = self._role(payload, model, by_model)
        encoding = payload.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise HttpError(
                400,
                f"encoding_format must be 'float' or 'base64', got {encoding!r}",
                code="invalid_encoding_format",
                param="encoding_format",
            )
        dimensions = payload.get("dimensions")
        if dimensions is not None and dimensions != model.contract.output_dim:
            raise HttpError(
                400,
                f"dimensions={dimensions!r}: this server's contract makes "
                f"{model.contract.output_dim}-dimensional vectors; a shorter Matryoshka cut is "
                "another contract (serve it with --truncate-dim)",
                code="invalid_dimensions",
                param="dimensions",
            )
        return payload, texts, model, role, encoding, raw_vectors

    def _texts(self, value: Any) -> list[str]:
        if value is None:
            raise HttpError(400, "the request has no 'input'", code="missing_input", param="input")
        texts = [value] if isinstance(value, str) else value
        if (
            isinstance(texts, list)
            and texts
            and all(
                isinstance(t, int) or (isinstance(t, list) and all(isinstance(i, int) for i in t))
                for t in texts
            )
        ):
            raise HttpError(
                400,
                "input holds token ids; this server embeds text (its tokenizer is part of the "
                "contract): send the texts themselves",
                code="invalid_input",
                param="input",
            )
        if isinstance(texts, list) and len(texts) > self.limits.max_inputs:
            raise HttpError(
                413,
                f"input holds {len(texts)} texts; this server takes at most "
                f"{self.limits.max_inputs} per request (send smaller batches)",
                code="too_many_inputs",
                param="input",
            )
        try:
            checked = check_texts(
                texts, "input", single="send a string or a list of strings", allow_empty=False
            )
        except InvalidInputError as exc:
            raise HttpError(400, str(exc), code="invalid_input", param="input") from None
        empty = next((i for i, t in enumerate(checked) if not t.strip()), None)
        if empty is not None:
            raise HttpError(
                400,
                f"input[{empty}] is empty or blank; there is nothing to embed",
                code="invalid_input",
                param="input",
            )
        return checked

    def _resolve(self, model: Any, scope: Scope) -> tuple[ServedModel, Role | None]:
        """The served model a request names and the role its id names; kept in ``scope`` for
        the response's fingerprint header."""
        if model is None:
            if self._single is not None:
                raise HttpError(
                    400,
                    "the field 'model' is required: one of "
                    f"{', '.join(repr(m) for m in self.model_ids)}",
                    code="missing_model",
                    param="model",
                )
            raise HttpError(
                400,
                f"the field 'model' is required: this server serves {len(self.models)} models, "
                f"{self._listed()}, and gives no request a default one",
                code="missing_model",
                param="model",
            )
        # An id of the model, of one of its roles, or of its recipe: what ctxemb's own client
        # sends, which any server of the recipe answers under any served name or label (the
        # fingerprint header and the canary still decide).
        found = self._ids.get(model) if isinstance(model, str) else None
        if found is None:
            served = (
                ", ".join(repr(m) for m in self.model_ids)
                if self._single is not None
                else self._listed()
            )
            raise HttpError(
                404,
                f"model {model!r} is not served here; this server serves {served}",
                code="model_not_found",
                param="model",
            )
        scope[_MODEL_KEY] = found[0]
        return found

    def _listed(self) -> str:
        """The served model ids, for a message of a server of several."""
        names = ", ".join(repr(n) for n in self.models)
        return f"{names} (each also as ID:query and ID:document)"

    def _role(self, payload: Mapping[str, Any], served: ServedModel, by_model: Role | None) -> Role:
        model = payload.get("model")
        given = payload.get("input_type")
        if given is not None and (not isinstance(given, str) or given not in _ROLE_FIELDS):
            raise HttpError(
                400,
                f"input_type must be 'query' or 'document', got {given!r}",
                code="invalid_input_type",
                param="input_type",
            )
        by_field = _ROLE_FIELDS[given] if given is not None else None
        if by_model and by_field and by_model is not by_field:
            raise HttpError(
                400,
                f"model {model!r} names the {by_model.value} role but input_type is {given!r}",
                code="conflicting_role",
                param="input_type",
            )
        role = by_field or by_model
        if role is not None:
            return role
        if served.symmetric:
            return Role.DOCUMENT
        c = served.contract
        sides = (
            "a separate query encoder"
            if c.query_model is not None
            else f"query_prefix={c.query_prefix!r}, document_prefix={c.document_prefix!r}"
        )
        raise HttpError(
            400,
            f"this contract's query and document sides differ ({sides}), so the role decides "
            "the vectors and is never guessed: send input_type 'query' or 'document', or use "
            f"the model id {served.name + ':query'!r} or {served.name + ':document'!r}",
            code="role_required",
            param="input_type",
        )


def _precision(value: Any) -> bool:
    """Whether a request asks for the vectors before the contract's precision step."""
    if value is None:
        return False
    if value != "float32":
        raise HttpError(
            400,
            f"precision may only be 'float32' (the vectors before the contract's precision "
            f"step), got {value!r}",
            code="invalid_precision",
            param="precision",
        )
    return True


def _encode(vector: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _too_large(size: int, limit: int) -> str:
    return (
        f"the request body is {size:,} bytes; this server reads at most {limit:,} "
        "(send smaller batches)"
    )
