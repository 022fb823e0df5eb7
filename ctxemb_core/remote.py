"""A remote encoder: a contract's vectors from an embedding server, held to it by the canary.

The server may be ``ctxemb serve`` (``api="ctxemb"``: it runs the whole contract and says which
one, so its fingerprint is compared field by field) or any OpenAI-compatible embedding server
(``api="openai"``: text-embeddings-inference, Infinity, vLLM, an OpenAI endpoint). For the latter
the caller's contract decides: the role's prefix, the Matryoshka cut and the normalisation are
applied here, on the client, and the canary decides whether the server reproduces the rest —
weights, pooling, truncation — which is why its probes include one longer than ``max_tokens``.

The URL is a base, as for the ``openai`` client: ``/embeddings`` is appended to it
(``http://host:8080/v1`` posts to ``/v1/embeddings``; ``ctxemb serve`` answers with and without
the ``/v1``).

One ``ctxemb serve`` may serve several contracts, one model id each (both sides of an
upgrade). It then names no contract of its own (``GET /contract`` asks for a model), and the
encoder reads the contract of each model it lists and keeps the one that is its contract by
:func:`~ctxemb_core.contract.same_contract`; none is :class:`ContractMismatchError` naming the
served ids and the fields that differ from the nearest. Its requests name the recipe's id,
which that model answers, and every answer still carries that model's fingerprint and meets
the canary. A server that does not serve the encoder's contract is that mismatch wherever it
is met: at the first contact, or behind a balancer when a replica of several contracts
answers the recipe's id with a 404 (as a replica of one other contract answers with its
fingerprint). With ``model=`` (an id asked for), a server that lacks the id and the contract
is that mismatch too; one that serves the contract under another id is
:class:`ModelNotFoundError` naming it.

A URL may be many servers: replicas behind a load balancer, per request or per connection.
No vector is returned unless the server that made it has passed the canary:

* ``ctxemb serve`` names its process in every response (``ctxemb-instance``). The encoder keeps
  the instances it has verified (a bounded set), verifies each new one once, before any answer
  of it is used, and again every ``check_every`` requests and ``check_seconds`` seconds of it.
* A third-party server names nothing, but a restarted server or another replica is always a new
  connection: every new connection is verified before its first answer is used, and again on
  the schedule (what a connection cannot show: a server behind a proxy that keeps it).

An instance or connection that failed its check has every answer refused. The canary requests
vary from round to round (the probes in another order, some twice, a fresh ``user`` field), so
no response cache can answer them for a server it hides.

The transport is the standard library's ``http.client`` (one keep-alive connection per thread):
a remote encoder needs no extra install, and the client's own cost per request stays a few
microseconds of parsing beside the server's work. ``timeout`` bounds each whole response.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import io
import itertools
import json
import math
import os
import random
import re
import secrets
import shlex
import socket
import threading
import time
import urllib.parse
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ctxemb_core.contract import EmbeddingContract, Precision, Role, same_contract
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    EncoderDriftError,
    InvalidInputError,
    ModelNotFoundError,
    RemoteEncoderError,
)
from ctxemb_core.pooling import l2_normalize
from ctxemb_core.remedy import Said
from ctxemb_core.stamp import CANARY_TOLERANCE, PROBES, IndexStamp, agreement

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

# The most instances (or connections) remembered; the oldest is forgotten first (and verified
# again should it answer again).
_MAX_INSTANCES = 256
# Canary requests one verification may send before it gives up reaching the server it checks
# (a balancer may send each request elsewhere); each is one of the server's smallest requests.
_MAX_CANARY_REQUESTS = 32
# Attempts at one batch: an answer from a server that could not be verified in time, or one that
# asked for another model id, is sent again (to wherever the balancer sends it).
_MAX_ATTEMPTS = 8
# How far from unit length a vector of a normalising contract may be (float16 servers: ~1e-3).
_UNIT_SLACK = 1e-2

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
            f"url must look like http://host:port[/base] (an embedding server), got {url!r}"
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
    if base.endswith(("/embeddings", "/contract")):
        raise InvalidInputError(
            f"url {url!r} names a route; give the server's base URL (as the openai client's "
            f"base_url), {urllib.parse.urlunsplit(parts._replace(path=base.rsplit('/', 1)[0]))!r}: "
            "/embeddings is appended to it"
        )
    return parts.scheme, parts.hostname, port, base


def check_url(url: Any) -> str:
    """``url`` if it is an ``http(s)://host[:port][/base]`` URL an encoder can use, else
    :class:`~ctxemb_core.errors.InvalidInputError` saying what is wrong."""
    _split_url(url)
    return str(url)


def _check_count(value: Any, name: str, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        least = "0" if allow_zero else "1"
        raise InvalidInputError(f"{name} must be an integer of at least {least}, got {value!r}")
    return value


class _TooSlow(TimeoutError):
    """The whole response did not arrive within the timeout."""


class _Paced(io.RawIOBase):
    """A socket read under one deadline: each read may wait only for what is left of it, so a
    server trickling a byte at a time cannot hold the client beyond ``timeout``."""

    def __init__(self, sock: socket.socket, conn: _Connection) -> None:
        self._sock = sock
        # The socket's own reader: it holds the socket open for the answer's body, as
        # http.client expects, when the connection is closed after the headers (HTTP/1.0).
        self._raw = sock.makefile("rb", buffering=0)
        self._conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._conn.deadline - time.monotonic()
        if left <= 0:
            raise _TooSlow
        self._sock.settimeout(left)
        try:
            return self._raw.readinto(buffer) or 0
        except TimeoutError:
            raise _TooSlow from None

    def close(self) -> None:
        self._raw.close()
        super().close()


class _SocketView:
    """What ``http.client.HTTPResponse`` asks of a socket (``makefile``), paced."""

    def __init__(self, sock: socket.socket, conn: _Connection) -> None:
        self._sock = sock
        self._conn = conn

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_Paced(self._sock, self._conn))


class _Connection:
    """One keep-alive connection, numbered: a new number is a new connection (maybe another
    server behind the same URL)."""

    def __init__(self, http: http.client.HTTPConnection, serial: int) -> None:
        self.http = http
        self.serial = serial
        self.deadline = math.inf
        http.response_class = self._response  # type: ignore[assignment]

    def _response(self, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        return http.client.HTTPResponse(_SocketView(sock, self), *args, **kwargs)  # type: ignore[arg-type]


class _Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    payload: Any
    connection: int  # the serial of the connection that carried it


_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;]+")


class _Http:
    """One keep-alive connection per thread to one server, JSON in and out."""

    _serials = itertools.count(1)

    def __init__(self, url: str, timeout: float, headers: Mapping[str, str]) -> None:
        self.url = url.rstrip("/")
        self.scheme, self.host, self.port, self.base = _split_url(url)
        self.timeout = timeout
        self.headers = dict(headers)
        self._secrets = [v.split(None, 1)[-1] for v in self.headers.values() if v]
        self._local = threading.local()
        self._opened: list[_Connection] = []  # every thread's, closed by close()
        self._opened_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"_Http({self.url!r})"

    def redact(self, text: str) -> str:
        """``text`` without the API key (a server may echo the Authorization header)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return _BEARER.sub(r"\1***", text)

    def _connection(self) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = _Connection(cls(self.host, self.port, timeout=self.timeout), next(self._serials))
            self._local.conn = conn
            with self._opened_lock:
                self._opened.append(conn)
        return conn

    def current(self) -> int | None:
        """The serial of this thread's open connection, if it has one."""
        conn = getattr(self._local, "conn", None)
        return None if conn is None else conn.serial

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.http.close()
            with self._opened_lock:
                if conn in self._opened:
                    self._opened.remove(conn)
        self._local.conn = None

    def request(self, method: str, path: str, body: Any = None) -> _Answer:
        """One request, its whole answer within ``timeout``; one reconnect on a broken
        keep-alive connection (a restarted server), then :class:`RemoteEncoderError`."""
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Accept": "application/json", **self.headers}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            conn = self._connection()
            conn.deadline = time.monotonic() + self.timeout
            if conn.http.sock is not None:
                conn.http.sock.settimeout(self.timeout)
            try:
                conn.http.request(method, self.base + path, body=data, headers=headers)
                response = conn.http.getresponse()
                raw = response.read()
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self._drop()
                if isinstance(exc, TimeoutError):
                    slow = (
                        f"the embedding server at {self.url} was too slow: no complete answer "
                        f"to {method} {self.base + path} within {self.timeout:g} s"
                    )
                    raise RemoteEncoderError(
                        f"{slow} (timeout=). Raise timeout= if it is busy, or check the server",
                        cli=f"{slow}. Check the server, or run again when it is less busy",
                    ) from None
                if attempt == 0:
                    continue
                raise RemoteEncoderError(
                    self.redact(
                        f"the embedding server at {self.url} did not answer {method} "
                        f"{self.base + path}: {type(exc).__name__}: {exc}. Is it running "
                        f"(ctxemb serve MODEL --port {self.port})?"
                    )
                ) from None
            if response.will_close or conn.http.sock is None:
                # Closed after this answer: the next request is a new connection (and may
                # reach another server), never the same one silently reopened.
                self._drop()
            found = {k.lower(): v for k, v in response.getheaders()}
            try:
                parsed = json.loads(raw) if raw else None
            except (ValueError, RecursionError):
                raise RemoteEncoderError(
                    self.redact(
                        f"the server at {self.url} answered {method} {self.base + path} with "
                        f"HTTP {response.status} and a body that is not JSON: "
                        f"{self.redact(raw[:300].decode('utf-8', 'replace'))[:200]!r}"
                    )
                ) from None
            return _Answer(response.status, found, parsed, conn.serial)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close every thread's connection (a thread that sends again opens a new one)."""
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.http.close()
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


def _error_code(payload: Any) -> Any:
    err = payload.get("error") if isinstance(payload, Mapping) else None
    return err.get("code") if isinstance(err, Mapping) else None


def _names_no_model(answer: _Answer) -> bool:
    """Whether ``answer`` is a server of several contracts asking which one (``GET /contract``
    without a model)."""
    return answer.status == 400 and _error_code(answer.payload) == "missing_model"


def _not_found(answer: _Answer) -> bool:
    """Whether ``answer`` is ``ctxemb serve`` saying it serves no model of the id asked."""
    return answer.status == 404 and _error_code(answer.payload) == "model_not_found"


#: Naming one contract of a server of several, for Python and for the CLI.
_NAME_ONE = Said("server_contract(url, model=ID), or served_model=ID", "--served-model ID")
#: Embedding through another OpenAI-compatible server.
_OPENAI = Said("api='openai'", "--api openai")


def _answers_to(served: ServerContract) -> tuple[str, ...]:
    """The ids under which a server answers for ``served``: its model's, each role's, and the
    recipe's."""
    name = served.model
    return (name, f"{name}:query", f"{name}:document", served.contract.recipe_id)


def _misnamed(url: str, served: ServerContract, asked: str) -> ModelNotFoundError:
    """The server at ``url`` serves the contract asked for, under another id than ``asked``."""
    said = (
        f"the embedding server at {url} serves this contract as model {served.model!r}, not "
        f"{asked!r}: give {{do}}, or leave it out"
    )
    named = Said(f"served_model={served.model!r}", f"--served-model {shlex.quote(served.model)}")
    return named.into(ModelNotFoundError, said)


def _contract_path(model: str) -> str:
    return "/contract?model=" + urllib.parse.quote(model, safe="")


def server_contract(url: str, *, model: str | None = None, timeout: float = 30.0) -> ServerContract:
    """The contract ``ctxemb serve`` at ``url`` serves, with its stamp and instance id.

    Args:
        url: the server's base URL.
        model: the model id (or a role's, or a recipe's) of a server of several contracts;
            a server of one checks it names its model.
        timeout: seconds the answer may take.

    Raises:
        RemoteEncoderError: no server there, or not a ctxemb server (no ``/contract``).
        InvalidInputError: a server of several contracts and no ``model``, or a ``model`` it
            does not serve (the message lists the ids it serves).
        DamagedStampError: the server's stamp does not hold together.
    """
    http_ = _Http(url, timeout, {})
    try:
        if model is None:
            answer = http_.request("GET", "/contract")
            if _names_no_model(answer):
                raise _NAME_ONE.into(
                    InvalidInputError,
                    f"the server at {http_.url} serves several contracts; name one ({{do}}). "
                    f"It says: {_error_message(answer.payload)}",
                )
            return _read_contract(http_, answer)
        answer = http_.request("GET", _contract_path(model))
        if _not_found(answer):
            raise InvalidInputError(
                f"the server at {http_.url} does not serve model {model!r}: "
                f"{_error_message(answer.payload)}"
            )
        served = _read_contract(http_, answer)
        if model not in _answers_to(served):
            # A server of one contract answers /contract whatever the model asked.
            raise InvalidInputError(
                f"the server at {http_.url} serves model {served.model!r}, not {model!r}"
            )
        return served
    finally:
        http_.close()


def _read_contract(http_: _Http, answer: _Answer) -> ServerContract:
    status, headers, payload, _ = answer
    if status != 200 or not isinstance(payload, Mapping):
        raise _OPENAI.into(
            RemoteEncoderError,
            http_.redact(
                f"the server at {http_.url} does not say which contract it serves (GET "
                f"{http_.base}/contract answered HTTP {status}: {_error_message(payload)}). Is it "
                "ctxemb serve? For another OpenAI-compatible server use {do} with the contract "
                "it should reproduce."
            ),
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
    named = payload.get("fingerprint")
    if not (
        isinstance(named, str)
        and same_contract(contract, stamp, exact=True)
        and same_contract(contract, named, exact=True)
    ):
        raise DamagedStampError(
            f"the server at {http_.url} names a fingerprint that is not its contract's"
        )
    header = headers.get(FINGERPRINT_HEADER)
    if (header is not None and not same_contract(contract, header, exact=True)) or headers.get(
        INSTANCE_HEADER
    ) not in (None, instance):
        raise DamagedStampError(
            f"the server at {http_.url} sends {FINGERPRINT_HEADER} / {INSTANCE_HEADER} headers "
            "that are not its contract's fingerprint and its instance"
        )
    return ServerContract(contract, stamp, instance, model)


@dataclass
class _Server:
    """What is known of one instance (``ctxemb``) or connection (``openai``)."""

    fingerprint: str | None = None
    verified_at: float | None = None  # when its check last passed
    since: int = 0  # answers used since then
    error: BaseException | None = None  # its check failed: no answer of it is used
    passed: set[Role] = field(default_factory=set)  # the roles its current check has passed


def _switched(server: _Server, fingerprint: str | None) -> bool:
    """Whether an answer names another contract than the instance's last (``None``: none
    named, an ``openai`` connection or an instance not heard from yet)."""
    if server.fingerprint is None or fingerprint is None:
        return not (server.fingerprint is None and fingerprint is None)
    return not same_contract(server.fingerprint, fingerprint, exact=True)


class RemoteEncoder:
    """The vectors of ``contract`` from the embedding server at ``url``.

    Args:
        contract: the recipe the server must reproduce.
        url: the server's base URL, ``http://host:port[/base]``; ``/embeddings`` is appended
            (as the ``openai`` client does: ``http://host:8080/v1`` for most servers).
        api: ``"ctxemb"`` (``ctxemb serve``) or ``"openai"`` (any OpenAI-compatible server).
        model: the model id to send (default: the server's for ``ctxemb``, the contract's model
            name for ``openai``; a server started with ``--served-model-name`` needs it).
        api_key_env: the name of an environment variable holding an API key, sent as a bearer
            token; the key itself is read when the encoder is built, is never stored in a
            config, and is removed from every error a server's answer could put it in.
        reference: the canary to hold the server to (an index's stamp). Required for
            ``openai``; for ``ctxemb`` the server's own stamp is the default.
        timeout: seconds one whole response may take.
        batch_size: the most texts in one request.
        check_every: re-check an instance (connection) after this many of its answers (0: never
            by count).
        check_seconds: re-check it after this many seconds (0: never by time).
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
        if model is not None and (not isinstance(model, str) or not model.strip()):
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
        if reference is not None:
            reference.check_contract(contract)
        headers: dict[str, str] = {}
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise InvalidInputError(
                    f"api_key_env={api_key_env!r}: that environment variable is not set",
                    cli=f"--api-key-env {api_key_env}: that environment variable is not set",
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
        self.timeout = float(timeout)
        self._http = _Http(url, self.timeout, headers)
        self.url = self._http.url
        #: The model id sent: ``model``; else for ``ctxemb serve`` the recipe's id, which every
        #: server of the contract answers under any served name or label (replicas behind one
        #: URL need not share one), and for ``openai`` the contract's model name.
        self.model: str = model or (contract.recipe_id if api == "ctxemb" else contract.model)
        c = contract
        # One request checks both roles when they embed alike.
        self._roles: tuple[Role, ...] = (
            (Role.DOCUMENT,)
            if c.query_prefix == c.document_prefix and c.query_model is None
            else (Role.DOCUMENT, Role.QUERY)
        )
        self._lock = threading.Lock()  # the tables below
        self._checking = threading.Lock()  # one verification at a time
        self._servers: OrderedDict[str, _Server] = OrderedDict()
        self._contracts: dict[str, ServerContract | BaseException] = {}  # by fingerprint
        self._random = random.Random(secrets.randbits(64))
        #: Verifications started (one per new instance or connection, and per scheduled round),
        #: requests sent, the checks each instance (connection) passed (a canary request
        #: another instance answered counts for that one), and the canary requests each answered.
        self.checks = 0
        self.requests = 0
        self.verifications: Counter[str] = Counter()
        self.canary_answers: Counter[str] = Counter()
        #: The instance (``ctxemb``) or connection (``openai``) verified last.
        self.instance: str | None = None
        #: The model id under which ``ctxemb serve`` publishes this contract (on a server of
        #: several, the one picked); ``None`` for ``openai``.
        self.served_id: str | None = None
        try:
            self._verify_first()
        except Exception as exc:
            raise self._scrubbed(exc) from None

    def __repr__(self) -> str:
        return f"RemoteEncoder({self.url!r}, api={self.api!r})"

    @property
    def verified(self) -> tuple[str, ...]:
        """The instances (``ctxemb``; connections for ``openai``) whose check has passed."""
        with self._lock:
            return tuple(k for k, s in self._servers.items() if s.verified_at is not None)

    # -- verification ------------------------------------------------------------------------

    def _verify_first(self) -> None:
        """Verify whichever server answers first, so a wrong one is refused at once."""
        if self.api == "ctxemb":
            served = self._learn_contract()
            passed = self._verify(served.instance, served.contract.fingerprint)
        else:
            passed = self._verify_connection()
        if not passed:
            raise RemoteEncoderError(
                f"the server at {self.url} could not be verified: the server that answered "
                f"first was not reached again in {_MAX_CANARY_REQUESTS} canary requests"
            )

    def _learn_contract(self) -> ServerContract:
        """Read ``/contract`` from whichever instance answers; remember it by fingerprint.
        On a server of several contracts, the one that is this encoder's
        (:meth:`_pick_contract`)."""
        answer = self._http.request("GET", "/contract")
        if _names_no_model(answer):
            instance = answer.headers.get(INSTANCE_HEADER)
            try:
                served = self._pick_contract(instance)
            except (ContractMismatchError, ModelNotFoundError) as exc:
                if instance is not None:
                    with self._lock:
                        self._server(instance).error = exc  # every answer of it is refused
                raise
        else:
            served = _read_contract(self._http, answer)
            asked = self.requested_model
            # The contract asked for under another id (another contract under another id is
            # the mismatch below, naming its fields).
            if (
                asked is not None
                and asked not in _answers_to(served)
                and same_contract(served.contract, self.contract)
            ):
                raise _misnamed(self.url, served, asked)
        fingerprint = served.contract.fingerprint
        if fingerprint not in self._contracts:
            if not same_contract(served.contract, self.contract):
                error = ContractMismatchError(
                    served.contract, self.contract, server=self.url, instance=served.instance
                )
                self._contracts[fingerprint] = error
                raise error
            self._contracts[fingerprint] = served
        known = self._contracts[fingerprint]
        if isinstance(known, ContractMismatchError):
            raise known.answered_by(served.instance)  # another replica: named for itself
        if isinstance(known, BaseException):
            raise known
        self.served_id = known.model
        return known

    def _pick_contract(self, instance: str | None) -> ServerContract:
        """The contract of the server of several that is ``instance`` (behind a balancer,
        asked until it answers) that is this encoder's, by :func:`same_contract`: of the model
        asked for (``model=``), else of any model it lists.

        Raises :class:`ContractMismatchError` when it serves none, naming its model ids and
        the fields that differ from the nearest (a server that lacks the id asked for and this
        contract does not serve this encoder, as a server of one other contract does not);
        :class:`ModelNotFoundError` when it serves this contract under another id than the one
        asked for.
        """
        ids = self._served_ids(instance)
        asked = self.requested_model
        seen: list[ServerContract] = []
        for model in ids:
            served = _read_contract(self._http, self._ask(_contract_path(model), instance))
            if same_contract(served.contract, self.contract):
                if asked is not None and asked not in _answers_to(served):
                    raise _misnamed(self.url, served, asked)
                return served
            seen.append(served)
        if not seen:
            raise RemoteEncoderError(f"the server at {self.url} lists no model at GET /models")
        nearest = min(seen, key=lambda s: len(s.contract.diff(self.contract).changes))
        raise ContractMismatchError(
            nearest.contract,
            self.contract,
            server=self.url,
            served_models=ids,
            served_model=nearest.model,
            instance=nearest.instance,
        )

    def _ask(self, path: str, instance: str | None) -> _Answer:
        """``GET path`` as ``instance`` answers it (any instance when ``None``): behind a
        balancer, asked again until that instance answers, a bounded number of times."""
        for _ in range(_MAX_CANARY_REQUESTS):
            answer = self._http.request("GET", path)
            if instance is None or answer.headers.get(INSTANCE_HEADER) in (None, instance):
                return answer
        raise RemoteEncoderError(
            f"the server at {self.url}: the instance {instance} that serves several contracts "
            f"was not reached again in {_MAX_CANARY_REQUESTS} requests"
        )

    def _not_served(self, key: str) -> BaseException:
        """The error of instance ``key``, a server of several contracts that answered this
        encoder's model id with ``model_not_found``: the :class:`ContractMismatchError` of
        :meth:`_pick_contract` (as an instance of one other contract gives), found once and
        then raised for every answer of it."""
        with self._checking:
            with self._lock:
                known = self._server(key).error
            if known is not None:
                return known
            error: BaseException
            try:
                found = self._pick_contract(key)
            except (ContractMismatchError, ModelNotFoundError) as exc:
                error = exc
            else:  # it lists this contract, yet refused its id: no answer of it is used
                error = RemoteEncoderError(
                    f"the server at {self.url} (instance {key}) lists model {found.model!r} of "
                    f"this contract but refused the id {self.model!r}"
                )
            with self._lock:
                self._server(key).error = error
            return error

    def _served_ids(self, instance: str | None) -> list[str]:
        """The model ids a server of several contracts (``instance``) lists (``GET /models``),
        roles aside."""
        status, _, payload, _ = self._ask("/models", instance)
        data = payload.get("data") if isinstance(payload, Mapping) else None
        if status != 200 or not isinstance(data, list):
            raise RemoteEncoderError(
                self._http.redact(
                    f"the server at {self.url} serves several contracts but does not list them "
                    f"(GET {self._http.base}/models answered HTTP {status})"
                )
            )
        return [
            str(d["id"])
            for d in data
            if isinstance(d, Mapping) and "id" in d and d.get("ctxemb_role") is None
        ]

    def _server(self, key: str) -> _Server:
        """The record of ``key`` (made on first sight; the oldest forgotten past the bound).
        Called with ``self._lock`` held."""
        server = self._servers.get(key)
        if server is None:
            server = self._servers[key] = _Server()
            while len(self._servers) > _MAX_INSTANCES:
                self._servers.popitem(last=False)
        else:
            self._servers.move_to_end(key)
        return server

    def _passed(self, server: _Server | None) -> bool:
        """Whether ``server``'s check has passed and is not due again."""
        if server is None or server.error is not None or server.verified_at is None:
            return False
        if self.check_every and server.since >= self.check_every:
            return False
        return not (
            self.check_seconds and time.monotonic() - server.verified_at >= self.check_seconds
        )

    def _use(self, key: str, fingerprint: str | None = None) -> bool:
        """Whether an answer of ``key`` (naming ``fingerprint``) may be used now; counts it
        when it may."""
        with self._lock:
            server = self._servers.get(key)
            if not self._passed(server):
                return False
            if fingerprint is not None and server is not None and _switched(server, fingerprint):
                return False
            assert server is not None
            server.since += 1
            return True

    def _start_check(self, key: str, fingerprint: str | None = None) -> _Server | None:
        """The record of ``key`` readied for a new check, or ``None`` when it passed meanwhile
        (another thread checked it). Raises the error of an instance that failed its check."""
        with self._lock:
            server = self._server(key)
            known = fingerprint is not None and server.fingerprint is not None
            if known and _switched(server, fingerprint):
                # The same instance id naming another contract: nothing of its past holds.
                self._servers[key] = server = _Server()
            if self.api == "ctxemb" and server.error is not None:
                raise server.error  # a process that failed stays failed
            if self._passed(server):
                return None
            server.error = None  # a connection that failed is checked again on every call
            server.verified_at = None
            server.passed.clear()
            self.checks += 1
            return server

    def _verify(self, key: str, fingerprint: str) -> bool:
        """Verify the ``ctxemb serve`` instance ``key``: its contract, then the canary from it.

        Returns whether it passed; ``False`` when it was not reached in a bounded number of
        canary requests (gone, or the balancer sent them elsewhere). Raises its error when
        its check fails (and on every answer of it after).
        """
        with self._checking:
            server = self._start_check(key, fingerprint)
            if server is None:
                return True
            for _ in range(_MAX_CANARY_REQUESTS):
                if fingerprint in self._contracts:
                    break
                with contextlib.suppress(ContractMismatchError):  # another instance's
                    self._learn_contract()
            known = self._contracts.get(fingerprint)
            if known is None:
                return False
            if isinstance(known, ContractMismatchError):
                known = known.answered_by(key)  # another replica: named for itself
            if isinstance(known, BaseException):
                with self._lock:
                    server.error = known
                raise known
            for _ in range(_MAX_CANARY_REQUESTS):
                missing = [r for r in self._roles if r not in server.passed]
                # An answer of another instance counts for that one; a 404 to the recipe's
                # id is an instance of another recipe, refused when its answer is used.
                self._canary_round(self._random.choice(missing), self.model)
                with self._lock:
                    if server.error is not None:
                        raise server.error
                    if server.verified_at is not None:
                        return True
            return False

    def _verify_connection(self) -> bool:
        """Verify this thread's connection to a third-party server (opened now when there is
        none) by the canary sent over it. ``False`` when it was replaced too often to finish."""
        key = self._http.current()
        server = self._start_check(str(key)) if key is not None else None
        if key is not None and server is None:
            return True
        for _ in range(_MAX_CANARY_REQUESTS):
            if server is None:
                missing = list(self._roles)
            else:
                missing = [r for r in self._roles if r not in server.passed]
            answered = self._canary_round(self._random.choice(missing), self.model).connection
            with self._lock:
                if answered != key:  # a new connection: its own check starts with this answer
                    key = answered
                    server = self._server(str(key))
                    self.checks += 1
                assert server is not None
                if server.error is not None:
                    raise server.error
                if server.verified_at is not None:
                    return True
        return False

    def _canary_round(self, role: Role, model: str) -> _Answer:
        """One canary request of ``role``, its probes in a new order and some twice; the answer
        counts for the instance (connection) that gave it, and is returned."""
        reference = self._given_reference
        probes = list((reference or self._any_stamp()).probes)
        rows = list(range(len(probes)))
        # Some probes twice (short ones: the long probe costs the server most).
        short = [i for i in rows if len(probes[i]) <= 200] or rows
        rows += self._random.choices(short, k=self._random.randint(1, 3))
        self._random.shuffle(rows)
        texts = [probes[i] for i in rows]
        answer = self._post(texts, role, model, nonce=True)
        key, fingerprint = self._identity(answer)
        with self._lock:
            self.canary_answers[key] += 1
            server = self._server(key)
            if server.error is not None:
                return answer
            if _switched(server, fingerprint):
                server.passed.clear()
                server.verified_at = None
            server.fingerprint = fingerprint
        if reference is None:
            known = self._contracts.get(fingerprint or "")
            if not isinstance(known, ServerContract):
                if isinstance(known, ContractMismatchError) and self.api != "openai":
                    known = known.answered_by(key)  # another replica: named for itself
                if isinstance(known, BaseException):
                    with self._lock:
                        server.error = known
                return answer  # a contract not read yet: checked when it is used
            reference = known.stamp
        if answer.status != 200:
            if answer.status == 503 or (self.api == "ctxemb" and _not_found(answer)):
                return answer  # busy, or an instance of another recipe: no evidence
            self._vectors(answer, 0, role)  # any other refusal is the caller's error
        width = len(reference.probes)
        # Where both roles embed alike, one answer is held to the rows of both.
        checked = (role,) if len(self._roles) == 2 else (Role.DOCUMENT, Role.QUERY)
        try:
            vectors = self._vectors(answer, len(texts), role)
            for side in checked:
                offset = width if side is Role.QUERY else 0
                scores = agreement(reference.canary[[i + offset for i in rows]], vectors)
                worst = int(np.argmin(scores))
                if not scores[worst] >= self.tolerance:
                    raise EncoderDriftError(
                        float(scores[worst]),
                        self.tolerance,
                        f"{side.value}: {texts[worst][:80]}",
                        server=self.url,
                        instance=None if self.api == "openai" else key,
                    )
        except (EncoderDriftError, RemoteEncoderError, InvalidInputError) as exc:
            with self._lock:
                server.error = exc
            return answer
        with self._lock:
            if self._passed(server):
                return answer  # verified already, and not due: nothing to renew
            server.passed.add(role)
            if all(r in server.passed for r in self._roles):
                server.passed.clear()
                server.verified_at = time.monotonic()
                server.since = 0
                self.instance = key
                self.verifications[key] += 1
        return answer

    def _any_stamp(self) -> IndexStamp:
        for known in self._contracts.values():
            if isinstance(known, ServerContract):
                return known.stamp
        raise AssertionError("no contract read yet")  # pragma: no cover

    # -- embedding ---------------------------------------------------------------------------

    def embed(self, texts: list[str], role: Role) -> np.ndarray:
        """The contract's vectors (before its precision step), ``(len(texts), output_dim)``."""
        out = np.empty((len(texts), self.contract.output_dim), dtype=np.float32)
        try:
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start : start + self.batch_size]
                out[start : start + len(chunk)] = self._embed_checked(chunk, role)
        except Exception as exc:
            raise self._scrubbed(exc) from None
        return out

    def _scrubbed(self, exc: Exception) -> Exception:
        """``exc`` without the API key in its message, whatever put it there (a server's
        echo of the Authorization header, in any field an error quotes)."""
        redact = self._http.redact
        exc.args = tuple(redact(a) if isinstance(a, str) else a for a in exc.args)
        cli = getattr(exc, "_cli", None)
        if isinstance(cli, str):
            exc._cli = redact(cli)  # type: ignore[attr-defined]
        return exc

    def _embed_checked(self, texts: list[str], role: Role) -> np.ndarray:
        """One batch's vectors, from an instance (connection) whose check has passed."""
        for _ in range(_MAX_ATTEMPTS):
            if self.api == "openai":
                # A new connection is verified before its first answer is used.
                current = self._http.current()
                if current is None or not self._use(str(current)):
                    if not self._verify_connection():
                        continue
                    current = self._http.current()
                    if current is None:
                        # The server closes every connection after an answer: each request is
                        # a new connection, checked by the canary sent just before it.
                        answer = self._post(texts, role, self.model)
                        return self._vectors(answer, len(texts), role)
                    if not self._use(str(current)):
                        continue
                answer = self._post(texts, role, self.model)
                if answer.connection != current:
                    continue  # replaced under the request: the new connection is checked first
                return self._vectors(answer, len(texts), role)
            answer = self._post(texts, role, self.model)
            key, fingerprint = self._identity(answer)
            if fingerprint is None:
                # An instance of several contracts without this one: a contract mismatch, as
                # an instance of one other contract is, wherever the balancer sent the request.
                raise self._not_served(key)
            if not self._use(key, fingerprint) and (
                not self._verify(key, fingerprint) or not self._use(key, fingerprint)
            ):
                continue
            return self._vectors(answer, len(texts), role)
        raise RemoteEncoderError(
            f"the server at {self.url} gave no answer from a verified server in "
            f"{_MAX_ATTEMPTS} attempts (servers replaced faster than they can be checked?)"
        )

    def _post(self, texts: list[str], role: Role, model: str, *, nonce: bool = False) -> _Answer:
        c = self.contract
        body: dict[str, Any]
        if self.api == "ctxemb":
            body = {
                "input": texts,
                "model": model,
                "input_type": role.value,
                "encoding_format": self._random.choice(("base64", "float")) if nonce else "base64",
                "precision": "float32",
            }
        else:
            prefix = c.prefix(role)
            body = {
                "input": [prefix + t for t in texts] if prefix else texts,
                "model": model,
                "encoding_format": "base64",
            }
        if nonce:  # OpenAI's end-user field: no server's vectors depend on it, every cache does
            body["user"] = f"ctxemb-canary-{secrets.token_hex(8)}"
        answer = self._http.request("POST", "/embeddings", body)
        with self._lock:
            self.requests += 1
        return answer

    def _identity(self, answer: _Answer) -> tuple[str, str | None]:
        """(key, fingerprint) of the server that gave ``answer``."""
        if self.api == "openai":
            return str(answer.connection), None
        fingerprint = answer.headers.get(FINGERPRINT_HEADER)
        instance = answer.headers.get(INSTANCE_HEADER)
        if fingerprint is None and instance is not None and _not_found(answer):
            # A server of several contracts, none under this encoder's id: it names no
            # fingerprint (the request was about none of its models).
            return instance, None
        if fingerprint is None or instance is None:
            if answer.status != 200:
                self._vectors(answer, 0, Role.DOCUMENT)  # raises, naming the HTTP error
            raise _OPENAI.into(
                RemoteEncoderError,
                f"the server at {self.url} sent no {FINGERPRINT_HEADER} / {INSTANCE_HEADER} "
                f"headers (HTTP {answer.status} to POST {self._http.base}/embeddings): it is not "
                "ctxemb serve (use {do} for another server)",
            )
        return instance, fingerprint

    def _vectors(self, answer: _Answer, count: int, role: Role) -> np.ndarray:
        status, _, payload, _ = answer
        c = self.contract
        if status != 200:
            message = self._http.redact(_error_message(payload))
            hint = ""
            if status == 404 and _error_code(payload) != "model_not_found":
                hint = (
                    f" (is {self.url} the base URL? /embeddings is appended to it, as the openai "
                    "client does: most servers want http://host:port/v1)"
                )
            if 400 <= status < 500:
                raise InvalidInputError(
                    f"the embedding server at {self.url} refused: {message}{hint}"
                )
            raise RemoteEncoderError(
                f"the embedding server at {self.url} failed (HTTP {status}): {message}"
            )
        if self.api == "openai" and c.precision is not Precision.FLOAT32 and _is_ctxemb(answer):
            # ctxemb serve answers an OpenAI-style request in the contract's stored form: the
            # precision step taken there, and again here, would give other vectors.
            what = (
                f"the server at {self.url} is ctxemb serve, whose OpenAI-compatible answers are "
                f"already in the contract's {c.precision.value} form; connect to it with its own "
                "protocol, which asks it for the float vectors the precision step takes"
            )
            raise RemoteEncoderError(
                f"{what} (api='ctxemb', the default)", cli=f"{what} (--api ctxemb, the default)"
            )
        width = c.output_dim if self.api == "ctxemb" else c.dimension
        vectors = _read_vectors(payload, count, width, self.url, unit=c.normalize)
        if self.api == "openai":
            if c.truncate_dim is not None:
                vectors = vectors[:, : c.truncate_dim]
            if c.normalize:
                vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def close(self) -> None:
        """Close the connections to the server (the next request opens one again)."""
        self._http.close()


def _is_ctxemb(answer: _Answer) -> bool:
    """Whether ``answer`` came from ``ctxemb serve`` (it names its contract and instance)."""
    return FINGERPRINT_HEADER in answer.headers and INSTANCE_HEADER in answer.headers


def _numbers(value: list[Any]) -> bool:
    return all(type(x) is float or type(x) is int for x in value)


def _read_vectors(payload: Any, count: int, width: int, url: str, *, unit: bool) -> np.ndarray:
    """The ``data[*].embedding`` of an OpenAI-style response, in input order, checked: numbers
    (not booleans), finite, the contract's width, and of unit length when it normalises."""
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
        elif isinstance(value, list) and _numbers(value):
            vector = np.asarray(value, dtype=np.float32)
        elif isinstance(value, list):
            raise RemoteEncoderError(
                f"the server at {url} answered an embedding that is not numbers (booleans, "
                "strings or nested lists are no vector)"
            )
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
    if unit:
        norms = np.linalg.norm(out, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1.0) > _UNIT_SLACK)
        if bad.size:
            norm = float(norms[bad[0]])
            what = "an all-zero vector" if norm == 0 else f"a vector of length {norm:.4g}"
            raise RemoteEncoderError(
                f"the server at {url} answered {what} (text {int(bad[0])}), where the contract "
                "normalises every vector to unit length: it does not run the contract's "
                "normalisation, so none of its vectors was used"
            )
    return out
