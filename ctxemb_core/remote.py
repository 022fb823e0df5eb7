"""A remote encoder: a contract's vectors from an embedding server, held to it by the canary.

The server may be ``ctxemb serve`` (``api="ctxemb"``: it runs the whole contract and says which
one, so its fingerprint is compared field by field) or any OpenAI-compatible embedding server
(``api="openai"``: text-embeddings-inference, Infinity, vLLM, an OpenAI endpoint). For the latter
the caller's contract decides: the role's prefix, the Matryoshka cut and the normalisation are
applied here, on the client, and the canary decides whether the server reproduces the rest —
weights, pooling, truncation — which is why its probes include one longer than ``max_tokens``.

No vector leaves a server that has not passed the canary: it is checked before the first
request, again every ``check_every`` requests and ``check_seconds`` seconds, and before a
replaced ``ctxemb serve`` process (another instance id in a response) is used; once a check
fails, every call checks again before anything is returned.

The transport is the standard library's ``http.client`` (one keep-alive connection per thread):
a remote encoder needs no extra install, and the client's own cost per request stays a few
microseconds of parsing beside the server's work.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import json
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxemb_core.contract import DiffKind, EmbeddingContract, Role
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    InvalidInputError,
    RemoteEncoderError,
)
from ctxemb_core.pooling import l2_normalize
from ctxemb_core.stamp import CANARY_TOLERANCE, PROBES, IndexStamp

__all__ = [
    "APIS",
    "FINGERPRINT_HEADER",
    "INSTANCE_HEADER",
    "RemoteEncoder",
    "ServerContract",
    "check_url",
    "long_probe",
    "remote_probes",
    "server_contract",
]

#: The server protocols a remote encoder speaks.
APIS = ("ctxemb", "openai")
#: The response header in which ``ctxemb serve`` names the fingerprint of the contract it serves.
FINGERPRINT_HEADER = "ctxemb-fingerprint"
#: The response header that names the server process (a new id: restarted or replaced).
INSTANCE_HEADER = "ctxemb-instance"

# The long probe: a first part long enough to fill max_tokens on its own, then a second part on
# another subject, so a server that truncates later (or not at all) pools other tokens.
_LONG_FIRST = "Sourdough bread rises because wild yeast and lactic bacteria ferment the flour. "
_LONG_SECOND = "Glaciers carve valleys as compacted ice slides slowly downhill over bedrock. "


def long_probe(max_tokens: int) -> str:
    """A probe text longer than ``max_tokens`` whose tokens past the limit change its vector.

    Its first part alone fills ``max_tokens`` (every sentence is 13 words, at least 13 tokens,
    repeated ``max_tokens / 8`` times), and the second part, on another subject, is as long
    again: a server that truncates at ``max_tokens`` embeds the first part only, one that cuts
    later (512 for 256) or never embeds the second too, and the canary sees it.
    """
    repeats = max(2, math.ceil(max_tokens / 8))
    return (_LONG_FIRST * repeats + _LONG_SECOND * repeats).strip()


def remote_probes(contract: EmbeddingContract) -> tuple[str, ...]:
    """The probes a third-party server is checked with: the stamp's, and one long probe."""
    return (*PROBES, long_probe(contract.max_tokens))


@dataclass(frozen=True)
class ServerContract:
    """What ``ctxemb serve`` says it serves (``GET /v1/contract``)."""

    contract: EmbeddingContract
    stamp: IndexStamp
    instance: str
    model: str


def _split_url(url: Any) -> tuple[str, str, int, str]:
    """(scheme, host, port, base path) of an ``http(s)://host[:port][/base]`` URL."""
    if not isinstance(url, str) or not url:
        raise InvalidInputError(f"url must be an http(s) URL string, got {url!r}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(
            f"url must look like http://host:port (an embedding server), got {url!r}"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidInputError(
            f"url {url!r} carries a query, fragment or credentials; give http(s)://host:port "
            "(the API key comes from the environment variable named by api_key_env)"
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise InvalidInputError(f"url {url!r} has no valid port: {exc}") from None
    base = parts.path.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return parts.scheme, parts.hostname, port, base


def check_url(url: Any) -> str:
    """``url`` if it is an ``http(s)://host[:port]`` URL an encoder can use, else
    :class:`~ctxemb_core.errors.InvalidInputError` saying what is wrong."""
    _split_url(url)
    return str(url)


def _check_count(value: Any, name: str, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        least = "0" if allow_zero else "1"
        raise InvalidInputError(f"{name} must be an integer of at least {least}, got {value!r}")
    return value


class _Http:
    """One keep-alive connection per thread to one server, JSON in and out."""

    def __init__(self, url: str, timeout: float, headers: Mapping[str, str]) -> None:
        self.url = url.rstrip("/")
        self.scheme, self.host, self.port, self.base = _split_url(url)
        self.timeout = timeout
        self.headers = dict(headers)
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []  # every thread's, closed by close()
        self._opened_lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = cls(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
            with self._opened_lock:
                self._opened.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            with self._opened_lock:
                if conn in self._opened:
                    self._opened.remove(conn)
        self._local.conn = None

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        """(status, lower-cased headers, parsed JSON) of one request; one reconnect on a broken
        keep-alive connection (a restarted server), then :class:`RemoteEncoderError`."""
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Accept": "application/json", **self.headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, self.base + path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self._drop()
                if attempt == 0 and not isinstance(exc, TimeoutError):
                    continue
                raise RemoteEncoderError(
                    f"the embedding server at {self.url} did not answer {method} {path}: "
                    f"{type(exc).__name__}: {exc}. Is it running (ctxemb serve MODEL --port "
                    f"{self.port})?"
                ) from None
            if response.getheader("connection", "").lower() == "close":
                self._drop()
            found = {k.lower(): v for k, v in response.getheaders()}
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                raise RemoteEncoderError(
                    f"the server at {self.url} answered {method} {path} with HTTP "
                    f"{response.status} and a body that is not JSON: {raw[:200]!r}"
                ) from None
            return response.status, found, parsed
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close every thread's connection (a thread that sends again opens a new one)."""
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()
        self._local = threading.local()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown: nothing left to close
            self.close()


def _error_message(payload: Any) -> str:
    if isinstance(payload, Mapping):
        err = payload.get("error", payload)
        if isinstance(err, Mapping) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if isinstance(payload.get("detail"), str):
            return payload["detail"]
    return json.dumps(payload)[:500]


def server_contract(url: str, *, timeout: float = 30.0) -> ServerContract:
    """The contract ``ctxemb serve`` at ``url`` serves, with its stamp and instance id.

    Raises:
        RemoteEncoderError: no server there, or not a ctxemb server (no ``/v1/contract``).
        DamagedStampError: the server's stamp does not hold together.
    """
    http_ = _Http(url, timeout, {})
    try:
        return _read_contract(http_)
    finally:
        http_.close()


def _read_contract(http_: _Http) -> ServerContract:
    status, headers, payload = http_.request("GET", "/v1/contract")
    if status != 200 or not isinstance(payload, Mapping):
        raise RemoteEncoderError(
            f"the server at {http_.url} does not say which contract it serves (GET /v1/contract "
            f"answered HTTP {status}: {_error_message(payload)}). Is it ctxemb serve? For another "
            "OpenAI-compatible server use api='openai' with the contract it should reproduce."
        )
    try:
        contract = EmbeddingContract.from_dict(dict(payload["contract"]))
        stamp = IndexStamp.from_metadata(payload["stamp"])
        instance = str(payload["instance"])
        model = str(payload["model"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DamagedStampError):
            raise
        raise RemoteEncoderError(
            f"the server at {http_.url} answered GET /v1/contract with something that is not a "
            f"ctxemb contract: {type(exc).__name__}: {exc}"
        ) from None
    if stamp.fingerprint != contract.fingerprint or payload.get("fingerprint") != stamp.fingerprint:
        raise DamagedStampError(
            f"the server at {http_.url} names a fingerprint that is not its contract's"
        )
    if headers.get(FINGERPRINT_HEADER) not in (None, contract.fingerprint):
        raise DamagedStampError(
            f"the server at {http_.url} sends a {FINGERPRINT_HEADER} header that is not its "
            "contract's fingerprint"
        )
    return ServerContract(contract, stamp, instance, model)


class RemoteEncoder:
    """The vectors of ``contract`` from the embedding server at ``url``.

    Args:
        contract: the recipe the server must reproduce.
        url: ``http://host:port`` (a trailing ``/v1`` is accepted).
        api: ``"ctxemb"`` (``ctxemb serve``) or ``"openai"`` (any OpenAI-compatible server).
        model: the model id to send (default: the server's for ``ctxemb``, the contract's model
            name for ``openai``).
        api_key_env: the name of an environment variable holding an API key, sent as a bearer
            token; the key itself is read when the encoder is built and is never stored in a
            config.
        reference: the canary to hold the server to (an index's stamp). Required for
            ``openai``; for ``ctxemb`` the server's own stamp is the default.
        timeout: seconds to wait for one response.
        batch_size: the most texts in one request.
        check_every: re-check the canary after this many requests (0: never by count).
        check_seconds: re-check the canary after this many seconds (0: never by time).
        tolerance: the lowest agreement a re-embedded probe may have to its canary vector.
    """

    def __init__(
        self,
        contract: EmbeddingContract,
        url: str,
        *,
        api: str = "ctxemb",
        model: str | None = None,
        api_key_env: str | None = None,
        reference: IndexStamp | None = None,
        timeout: float = 60.0,
        batch_size: int = 64,
        check_every: int = 1000,
        check_seconds: float = 600.0,
        tolerance: float = CANARY_TOLERANCE,
    ) -> None:
        if api not in APIS:
            raise InvalidInputError(f"api must be 'ctxemb' or 'openai', got {api!r}")
        if api == "openai" and reference is None:
            raise InvalidInputError(
                "a third-party server is held to the contract by canary vectors made elsewhere: "
                "pass reference= (an index's IndexStamp), or build the Embedder where the "
                "contract's model folder is found, which makes them"
            )
        if api == "openai" and contract.query_model is not None:
            raise InvalidInputError(
                "this contract has a separate query encoder; an OpenAI-compatible server serves "
                "one model per id. Serve it with ctxemb serve (api='ctxemb')"
            )
        if model is not None and (not isinstance(model, str) or not model):
            raise InvalidInputError(f"model must be a non-empty string, got {model!r}")
        if api_key_env is not None and (not isinstance(api_key_env, str) or not api_key_env):
            raise InvalidInputError(
                f"api_key_env must name an environment variable, got {api_key_env!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidInputError(
                f"timeout must be a positive number of seconds, got {timeout!r}"
            )
        _check_count(batch_size, "batch_size")
        _check_count(check_every, "check_every", allow_zero=True)
        if (
            isinstance(check_seconds, bool)
            or not isinstance(check_seconds, (int, float))
            or check_seconds < 0
        ):
            raise InvalidInputError(
                f"check_seconds must be a number of seconds (0: never by time), got "
                f"{check_seconds!r}"
            )
        headers: dict[str, str] = {}
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise InvalidInputError(
                    f"api_key_env={api_key_env!r}: that environment variable is not set"
                )
            headers["Authorization"] = f"Bearer {key}"
        self.contract = contract
        self.api = api
        self.api_key_env = api_key_env
        self.requested_model = model
        self.batch_size = batch_size
        self.check_every = check_every
        self.check_seconds = float(check_seconds)
        self.tolerance = tolerance
        self._given_reference = reference
        self._http = _Http(url, float(timeout), headers)
        self.url = self._http.url
        self._lock = threading.RLock()
        #: The server's instance id when it was last verified (``ctxemb`` only).
        self.instance: str | None = None
        self._served: str | None = None  # the fingerprint the server named when verified
        self.model: str = model or contract.model
        self._reference: IndexStamp | None = None
        self._verified_at = 0.0
        self._since_check = 0
        self._failed: BaseException | None = None
        #: Canary rounds run so far, and the requests sent (both for the curious and the tests).
        self.checks = 0
        self.requests = 0
        self._check()

    def __repr__(self) -> str:
        return f"RemoteEncoder({self.url!r}, api={self.api!r})"

    # -- verification ------------------------------------------------------------------------

    def _check(self) -> None:
        """Verify the server: its contract (``ctxemb``), then the canary re-embedded."""
        with self._lock:
            self.checks += 1
            try:
                reference = self._given_reference
                if self.api == "ctxemb":
                    served = _read_contract(self._http)
                    if served.contract.fingerprint != self.contract.fingerprint:
                        diff = served.contract.diff(self.contract)
                        if diff.kind is not DiffKind.LABEL:
                            raise ContractMismatchError(
                                served.contract, self.contract, server=self.url
                            )
                    self.instance = served.instance
                    self._served = served.contract.fingerprint
                    self.model = self.requested_model or served.model
                    if reference is None:
                        reference = served.stamp
                assert reference is not None
                reference.check_contract(self.contract)
                probes = list(reference.probes)
                fresh = np.concatenate(
                    [
                        self._embed_unchecked(probes, Role.DOCUMENT),
                        self._embed_unchecked(probes, Role.QUERY),
                    ]
                )
                reference.compare(fresh, self.tolerance, server=self.url)
            except BaseException as exc:
                self._failed = exc
                raise
            self._failed = None
            self._reference = reference
            self._verified_at = time.monotonic()
            self._since_check = 0

    def _due(self) -> bool:
        if self._failed is not None:
            return True
        if self.check_every and self._since_check >= self.check_every:
            return True
        return bool(self.check_seconds) and (
            time.monotonic() - self._verified_at >= self.check_seconds
        )

    # -- embedding ---------------------------------------------------------------------------

    def embed(self, texts: list[str], role: Role) -> np.ndarray:
        """The contract's vectors (before its precision step), ``(len(texts), output_dim)``."""
        out = np.empty((len(texts), self.contract.output_dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            with self._lock:
                if self._due():
                    self._check()
                self._since_check += 1
            vectors = self._embed_unchecked(chunk, role)
            failed = self._failed
            if failed is not None:  # another thread's canary round failed meanwhile
                raise failed
            out[start : start + len(chunk)] = vectors
        return out

    def _embed_unchecked(self, texts: list[str], role: Role) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.contract.output_dim), dtype=np.float32)
        c = self.contract
        if self.api == "ctxemb":
            body: dict[str, Any] = {
                "input": texts,
                "model": self.model,
                "input_type": role.value,
                "encoding_format": "base64",
                "precision": "float32",
            }
            width = c.output_dim
        else:
            prefix = c.prefix(role)
            body = {
                "input": [prefix + t for t in texts] if prefix else texts,
                "model": self.model,
                "encoding_format": "base64",
            }
            width = c.dimension
        for attempt in (0, 1):
            status, headers, payload = self._http.request("POST", "/v1/embeddings", body)
            self.requests += 1
            if self.api == "ctxemb" and status < 500:
                replaced = self._replaced(headers)
                if replaced:
                    if attempt == 0:
                        # A restarted or replaced server: verify it before using any answer.
                        self._check()
                        continue
                    raise RemoteEncoderError(
                        f"the server at {self.url} changed instance twice in one request"
                    )
            break
        if status != 200:
            message = _error_message(payload)
            if 400 <= status < 500:
                raise InvalidInputError(f"the embedding server at {self.url} refused: {message}")
            raise RemoteEncoderError(
                f"the embedding server at {self.url} failed (HTTP {status}): {message}"
            )
        vectors = _read_vectors(payload, len(texts), width, self.url)
        if self.api == "openai":
            if c.truncate_dim is not None:
                vectors = vectors[:, : c.truncate_dim]
            if c.normalize:
                vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _replaced(self, headers: Mapping[str, str]) -> bool:
        """Whether a response comes from another server than the one verified."""
        fingerprint = headers.get(FINGERPRINT_HEADER)
        instance = headers.get(INSTANCE_HEADER)
        if fingerprint is None or instance is None:
            raise RemoteEncoderError(
                f"the server at {self.url} sent no {FINGERPRINT_HEADER} / {INSTANCE_HEADER} "
                "headers: it is not ctxemb serve (use api='openai' for another server)"
            )
        return instance != self.instance or fingerprint != self._served

    def close(self) -> None:
        """Close the connections to the server (the next request opens one again)."""
        self._http.close()


def _read_vectors(payload: Any, count: int, width: int, url: str) -> np.ndarray:
    """The ``data[*].embedding`` of an OpenAI-style response, in input order, checked."""
    data = payload.get("data") if isinstance(payload, Mapping) else None
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else type(data).__name__
        raise RemoteEncoderError(f"the server at {url} answered {got} embeddings for {count} texts")
    out = np.empty((count, width), dtype=np.float32)
    seen = set()
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, Mapping) else None
        value = item.get("embedding") if isinstance(item, Mapping) else None
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RemoteEncoderError(f"the server at {url} answered an embedding index {index!r}")
        if index in seen:
            raise RemoteEncoderError(f"the server at {url} answered index {index} twice")
        seen.add(index)
        if isinstance(value, str):
            try:
                vector = np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
            except (binascii.Error, ValueError):
                raise RemoteEncoderError(
                    f"the server at {url} answered an embedding that is not base64"
                ) from None
        elif isinstance(value, list):
            try:
                vector = np.asarray(value, dtype=np.float32)
            except (TypeError, ValueError):
                raise RemoteEncoderError(
                    f"the server at {url} answered an embedding that is not numbers"
                ) from None
        else:
            raise RemoteEncoderError(f"the server at {url} answered no embedding for {index}")
        if vector.shape != (width,):
            raise RemoteEncoderError(
                f"the server at {url} answered vectors of width {vector.size}; the contract's "
                f"are {width} wide"
            )
        if not np.isfinite(vector).all():
            raise RemoteEncoderError(f"the server at {url} answered a vector that is not finite")
        out[index] = vector
    return out
