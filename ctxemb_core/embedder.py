"""The embedder: one contract, both roles, the same path for every text.

Its vectors come from one :class:`~ctxemb_core.source.EncoderSource`, chosen once when it is
built: the network loaded here (:class:`~ctxemb_core.local_source.LocalSource`), or a server at
a URL (:class:`~ctxemb_core.server_source.ServerSource`). Everything around the source (roles,
checks, the cache, the precision step, the truncation warning) is the same for both.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ctxemb_core.backends._tokenize import Tokenized
from ctxemb_core.backends.base import Encoder
from ctxemb_core.cache import EmbeddingCache
from ctxemb_core.contract import EmbeddingContract, Role
from ctxemb_core.errors import (
    DataFormatError,
    InvalidArgumentsError,
    InvalidInputError,
    ModelNotFoundError,
    TruncationWarning,
)
from ctxemb_core.folders.locate import register_model
from ctxemb_core.folders.manifest import read_manifest
from ctxemb_core.local_source import LocalSource, token_batches
from ctxemb_core.networks import (
    _ENCODERS,  # noqa: F401  (tests read the loaded networks here, where they always were)
    Network,
    folder_hint,
    hinted_folder,
    load_network,
    load_network_with,
)
from ctxemb_core.pooling import quantize
from ctxemb_core.remote import APIS, RemoteEncoder, remote_probes
from ctxemb_core.server_source import ServerSource
from ctxemb_core.settings import RunSettings, Setting, check_device
from ctxemb_core.source import BatchPlan, Encoded, EncoderSource
from ctxemb_core.stamp import IndexStamp
from ctxemb_core.tokens import TokenEmbeddings, TokenVectorsMixin, WordVector, check_batch
from ctxemb_core.validate import check_positive_int, check_text, check_texts

__all__ = ["Embedder", "TokenEmbeddings", "WordVector"]

# What an Embedder can be asked to run on: "auto" picks for the folder (see load_network).
_BACKENDS = ("auto", "onnx", "torch", "static")


def _check_backend(value: Any, name: str) -> Any:
    if value not in _BACKENDS:
        raise InvalidInputError(
            f"{name} must be 'auto', 'onnx', 'torch' or 'static', got {value!r}"
        )
    return value


class Embedder(TokenVectorsMixin):
    """Embeds texts exactly as one contract says, for documents and for queries.

    The role decides the prefix, so a query can never be embedded with the document prefix; the
    pooling, dense head, Matryoshka truncation, normalisation and precision follow the contract.

    Args:
        contract: the recipe, usually from :func:`ctxemb_core.contract_for`.
        path: the model folder; found from the contract (its weights digest or name) if omitted.
        query_path: the folder of a separate query encoder, for contracts that have one.
        backend: ``"auto"`` (ONNX Runtime when it is installed and the model exports, else
            torch, with a :class:`~ctxemb_core.errors.CtxembWarning` that says why: ONNX
            measured 1.95x sentence-transformers' documents/s and a third of its
            single-query latency on 2 CPU cores, see benchmarks/throughput.py), ``"onnx"`` or
            ``"torch"``. A static model's folder (a lookup table, no network) is served by
            ``"static"`` (numpy), which ``"auto"`` picks for it and ``"onnx"``/``"torch"`` refuse.
            Not part of the fingerprint: the stamp's canary proves a backend
            reproduces the vectors.
        device: where the network runs (``"cpu"``).
        batch_size: the most texts in one forward pass.
        token_budget: the most padded tokens in one forward pass; long texts go in smaller
            batches, short ones in larger (up to ``batch_size``). On 2 CPU cores both backends
            ran fastest at 512-2,048 (MiniLM, SciFact: 2,048 was 7 % faster than 8,192 on
            ONNX and 13 % on torch; shapes that fit the CPU caches beat fewer, larger calls).
        show_progress: a progress bar on long batches; ``None`` shows one for 1,000 texts or more
            when stderr is a terminal.
        cache: an :class:`~ctxemb_core.cache.EmbeddingCache`; texts already embedded under this
            contract and role are read from it instead of being encoded again.
        url: embed through the server at this base URL (``http://host:port/v1``;
            ``/embeddings`` is appended, as the ``openai`` client does) instead of loading the
            model (:mod:`ctxemb_core.remote`): ``ctxemb serve`` is held to the contract by its
            fingerprint and the canary, any other OpenAI-compatible server by the canary.
        api: the server's protocol, ``"ctxemb"`` (``ctxemb serve``) or ``"openai"``.
        api_key_env: for ``url``, the environment variable holding an API key (never stored).
        served_model: for ``url``, the model id the server answers to, where it is not the
            contract's model name (a server started with ``--served-model-name``, ``ctxemb
            serve --name``); by default ``ctxemb serve``'s own id, or the contract's model name.
        reference: for ``url``, the canary the server is held to (an index's
            :class:`~ctxemb_core.stamp.IndexStamp`); by default the server's own stamp
            (``ctxemb``) or canary vectors made here from the contract's model folder
            (``openai``, with a probe longer than ``max_tokens`` to catch another truncation).
        check_every: for ``url``, re-check the canary after this many requests (0: never).
        check_seconds: for ``url``, re-check the canary after this many seconds (0: never).
        timeout: for ``url``, the seconds one whole response may take.

    Example:
        >>> from ctxemb_core import Embedder, contract_for
        >>> emb = Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        >>> emb.embed_query("hello").shape
        (384,)
        >>> emb.embed_documents(["a cat", "a dog"]).shape
        (2, 384)
    """

    #: The run settings :meth:`config`, :meth:`config_for` and :meth:`from_config` write and
    #: read, in order (the contract and its folders' hints come first).
    run_settings: ClassVar[RunSettings] = RunSettings(
        owner="Embedder",
        described="an Embedder config",
        source="Embedder.config()",
        located=("contract", "path_hint", "query_path_hint"),
        settings=(
            Setting("backend", "auto", _check_backend, attribute="requested_backend"),
            Setting("device", "cpu", check_device),
            Setting("batch_size", 64, check_positive_int),
            Setting("token_budget", 2048, check_positive_int),
        ),
    )

    def __init__(
        self,
        contract: EmbeddingContract,
        *,
        path: str | Path | None = None,
        query_path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 64,
        token_budget: int = 2048,
        show_progress: bool | None = None,
        cache: EmbeddingCache | None = None,
        url: str | None = None,
        api: str = "ctxemb",
        api_key_env: str | None = None,
        served_model: str | None = None,
        reference: IndexStamp | None = None,
        check_every: int = 1000,
        check_seconds: float = 600.0,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(
                "Embedder needs an EmbeddingContract (see contract_for), got "
                f"{type(contract).__name__}"
            )
        # The counts are checked here; a backend or device is refused by the loader, which says
        # what it lacks (LazyEmbedder checks every setting before anything is loaded).
        self.run_settings.check({"batch_size": batch_size, "token_budget": token_budget})
        self.contract = contract
        #: The backend asked for (``"auto"``, ``"onnx"`` or ``"torch"``), kept for :meth:`config`.
        self.requested_backend = backend
        self.device = device
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.show_progress = show_progress
        self.cache = cache
        #: How many texts the last call truncated to ``max_tokens`` (:meth:`embed_float_counted`
        #: returns the count with the vectors, for callers that share the embedder).
        self.last_truncated = 0
        #: The server this embedder embeds through (``url=``), else ``None``.
        self.remote: RemoteEncoder | None = None
        #: Where the vectors come from, chosen once: the network here, or the server at ``url``.
        self.source: EncoderSource
        if url is not None:
            self._connect(url, path, query_path, api, api_key_env, reference)
            self.remote = RemoteEncoder(
                contract,
                url,
                api=api,
                api_key_env=api_key_env,
                model=served_model,
                reference=reference if api == "ctxemb" else self._reference(reference),
                batch_size=batch_size,
                check_every=check_every,
                check_seconds=check_seconds,
                timeout=timeout,
            )
            self.source = ServerSource(self.remote)
        else:
            local = self._load(path, query_path, backend, device)
            # The networks, where the token-vector calls (TokenVectorsMixin) read them.
            self._doc: Network = local.doc
            self._query: Network = local.query
            self.source = local
        #: The backend in use (``"auto"`` resolved to ``"onnx"``, ``"torch"`` or ``"static"``;
        #: ``"remote"`` for an embedder with a ``url``).
        self.backend: str = self.source.backend

    def _load(
        self, path: str | Path | None, query_path: str | Path | None, backend: str, device: str
    ) -> LocalSource:
        """The contract's networks, loaded here (the query encoder's, if it has its own)."""
        c = self.contract
        resolved, doc = load_network(c, c.model, c.weights, path, backend, device)
        query = doc
        if c.query_model is not None and c.query_weights is not None:
            query = load_network_with(
                c, c.query_model, c.query_weights, query_path, resolved, device
            )
        return LocalSource(c, resolved, doc, query)

    def __repr__(self) -> str:
        return f"Embedder({self.contract.describe()}, {self.source.describe()})"

    def _local(self, what: str) -> LocalSource:
        """The local source, or the refusal of ``what`` for an embedder with a ``url``."""
        if isinstance(self.source, LocalSource):
            return self.source
        url = self.remote.url if self.remote is not None else "a server"
        raise InvalidInputError(f"this embedder embeds through {url}; {what}")

    @property
    def _cache_key(self) -> str:
        return self.source.cache_key

    def _connect(
        self,
        url: str,
        path: str | Path | None,
        query_path: str | Path | None,
        api: str,
        api_key_env: str | None,
        reference: IndexStamp | None,
    ) -> None:
        """Check the remote options before a server is asked anything."""
        if path is not None or query_path is not None:
            raise InvalidArgumentsError(
                "url= and path=/query_path= exclude each other: the server holds the model"
            )
        if api not in APIS:
            raise InvalidInputError(f"api must be 'ctxemb' or 'openai', got {api!r}")
        if reference is not None and not isinstance(reference, IndexStamp):
            raise InvalidInputError(
                "reference must be an IndexStamp (an index's stamp), got "
                f"{type(reference).__name__}"
            )

    def _reference(self, given: IndexStamp | None) -> IndexStamp:
        """The canary a third-party server is held to: ``given``, else made here, from the
        contract's model folder, over the stamp's probes and one longer than max_tokens."""
        if given is not None:
            return given
        try:
            local = Embedder(self.contract, backend=self.requested_backend, device=self.device)
        except ModelNotFoundError as exc:
            raise ModelNotFoundError(
                "an OpenAI-compatible server is held to the contract by canary vectors made "
                f"elsewhere, and the contract's model is not here to make them ({exc}). Pass "
                "reference= (the stamp of an index written under the contract)."
            ) from None
        return IndexStamp.from_embedder(local, remote_probes(self.contract))

    @property
    def fingerprint(self) -> str:
        """The contract's fingerprint."""
        return self.contract.fingerprint

    @property
    def identity(self) -> str:
        """What makes this embedder's vectors, for anything remembered between calls (a
        verified open's record): the contract's fingerprint, the backend and the digests of
        the files actually loaded. A model folder's are the contract's weights (checked as they
        are read); an export's are its graph, tokenizer and heads, which its contract does not
        pin, so an export with an edited file and a manifest written to match is another
        identity than a clean copy (a copy elsewhere keeps it: files, not paths). With a
        ``url``: the server's address and protocol."""
        return self.source.identity

    @property
    def roles_alike(self) -> bool:
        """Whether both roles embed a text by the same computation: one network, one prefix,
        here (an embedding server's two roles are its own: the canary checks them apart)."""
        return self.source.roles_alike

    @property
    def model_path(self) -> Path:
        """The local folder of the (document) encoder; machine-specific, never fingerprinted."""
        return self._local("it has no model folder here").doc.folder

    def component_options(self) -> dict[str, Any]:
        """The keywords a framework component (a Haystack embedder, LangChain's
        ``ContractEmbeddings``) takes to embed exactly as this embedder does: the contract,
        its model folder, the run settings, and for one with a ``url`` the server instead of
        the folder (its key's variable, never the key)."""
        options: dict[str, Any] = {
            "contract": self.contract,
            "path": None,
            "backend": self.requested_backend,
            "device": self.device,
            "batch_size": self.batch_size,
            "token_budget": self.token_budget,
        }
        return {**options, **self.source.options()}

    # -- serialisation -----------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """JSON-ready settings :meth:`from_config` rebuilds this embedder from.

        What every framework's ``to_dict`` stores: the whole contract, where its model folders
        were found on this machine (a hint: the weights digest decides, never the path), and
        the run settings. The cache is not part of it (it is a local resource).

        Example:
            >>> config = json.loads(json.dumps(embedder.config()))  # doctest: +SKIP
            >>> Embedder.from_config(config).contract == embedder.contract  # doctest: +SKIP
            True
        """
        path, query_path = self.source.folders()
        config = self.config_for(
            self.contract, path=path, query_path=query_path, **self.run_settings.of(self)
        )
        remote = self.source.config()
        return config if remote is None else {**config, "path_hint": None, "remote": remote}

    @classmethod
    def config_for(
        cls,
        contract: EmbeddingContract,
        *,
        path: str | Path | None = None,
        query_path: str | Path | None = None,
        **settings: Any,
    ) -> dict[str, Any]:
        """The :meth:`config` of an embedder not built yet (nothing is loaded).

        For a framework component that builds its embedder lazily: the model folders are
        located (not read) when no path is given, and a folder that cannot be located yet is
        left out (``None``); :meth:`from_config` then finds the model as any contract's.
        ``settings`` are the run settings of :attr:`run_settings` (``backend``, ``device``,
        ``batch_size``, ``token_budget``); one left out is the constructor's default.
        """
        if not isinstance(contract, EmbeddingContract):
            raise InvalidInputError(
                f"config_for needs an EmbeddingContract, got {type(contract).__name__}"
            )
        values = cls.run_settings.complete(settings, "Embedder.config_for")
        return {
            "contract": contract.to_dict(),
            "path_hint": folder_hint(path, contract.model, contract.weights),
            "query_path_hint": (
                folder_hint(query_path, contract.query_model, contract.query_weights)
                if contract.query_model is not None
                else None
            ),
            **values,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any], **options: Any) -> Embedder:
        """Rebuild an embedder from :meth:`config` (``options`` override its run settings).

        A path hint is used only when the folder there has the contract's weights digest;
        otherwise the model is found as any contract's is (bundled, registered, by digest).

        Raises:
            DataFormatError: not a mapping, no contract, or keys :meth:`config` does not write.
        """
        # "remote": written by config() for an embedder with a url, beside the run settings.
        remote = config.get("remote") if isinstance(config, Mapping) else None
        local = {k: v for k, v in config.items() if k != "remote"} if remote else config
        settings = cls.run_settings.read(local)
        contract = EmbeddingContract.from_dict(dict(config["contract"]))
        if remote is not None:
            known = {"url", "api", "api_key_env", "check_every", "check_seconds", "served_model"}
            known |= {"timeout"}
            if not isinstance(remote, Mapping) or not set(remote) <= known or "url" not in remote:
                raise DataFormatError(
                    f"an Embedder config's 'remote' is a mapping with 'url' and at most "
                    f"{sorted(known)}, got {remote!r}"
                )
            return cls(contract, **dict(remote), **{**settings, **options})
        path = hinted_folder(config.get("path_hint"), contract.weights)
        query_path = None
        if contract.query_weights is not None:
            query_path = hinted_folder(config.get("query_path_hint"), contract.query_weights)
        return cls(contract, path=path, query_path=query_path, **{**settings, **options})

    @classmethod
    def from_export(cls, directory: str | Path, **options: Any) -> Embedder:
        """The embedder of a folder :func:`ctxemb_core.export.export_model` wrote.

        It needs only numpy, ``tokenizers`` and onnxruntime (no torch, transformers or onnx):
        every file is checked against the export's manifest before it is served, and the
        contract is the one the folder was exported under (same fingerprint, so indexes
        stamped through any backend open through it).

        Args:
            directory: the export's folder.
            options: run settings, as for :class:`Embedder` (``batch_size``, ``cache``, …);
                ``backend`` may be ``"auto"`` or ``"onnx"``.

        Raises:
            ModelNotFoundError: ``directory`` is not an export.
            MalformedModelError: a file of the export is missing or not the one exported.

        Example:
            >>> emb = Embedder.from_export("minilm-export")  # doctest: +SKIP
            >>> emb.embed_query("hello").shape  # doctest: +SKIP
            (384,)
        """
        if "path" in options or "query_path" in options:
            raise InvalidInputError("from_export takes the folder as directory, not path=")
        manifest = read_manifest(directory)
        embedder = cls(manifest.contract, path=directory, **options)
        # Found by its contract from now on only once every check of its files has passed: an
        # export refused here is not what a later Embedder(contract) in this process finds.
        register_model(manifest.contract.weights, manifest.folder)
        return embedder

    # -- text vectors ------------------------------------------------------------------------

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents (with the document prefix); ``(len(texts), output_dim)``."""
        return self._embed(check_batch(texts), Role.DOCUMENT)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed queries (with the query prefix); ``(len(texts), output_dim)``."""
        return self._embed(check_batch(texts), Role.QUERY)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; ``(output_dim,)``."""
        text = check_text(text, "text")
        return self._embed([text], Role.QUERY)[0]

    def embed(self, texts: Sequence[str], role: Role | str) -> np.ndarray:
        """Embed texts under an explicit role (what adapters with a role argument call)."""
        return self._embed(check_batch(texts), Role.parse(role, "role"))

    def _embed(self, texts: list[str], role: Role) -> np.ndarray:
        # One TruncationWarning per public call, for every text it cut (the cache's misses
        # and every batch summed), pointing at the caller's line.
        if self.cache is None:
            done = self._encode(texts, role)
            self._warn_truncated(done.truncated, len(texts), stacklevel=4)
            return quantize(done.vectors, self.contract.precision)
        cut, encoded = 0, 0  # only the texts encoded now, however the cache asks for them

        def compute(missing: list[str]) -> np.ndarray:
            nonlocal cut, encoded
            done = self._encode(missing, role)
            cut, encoded = cut + done.truncated, encoded + len(missing)
            return done.vectors

        vectors = self.cache.get_or_compute(self._cache_key, role, texts, compute)
        self._warn_truncated(cut, encoded, stacklevel=4)
        return quantize(vectors, self.contract.precision)

    def token_counts(self, texts: Sequence[str], role: Role | str) -> np.ndarray:
        """How many tokens the encoder reads of each text: the role's prefix added, cut to
        ``max_tokens``, special tokens included (what ``ctxemb serve`` reports as usage)."""
        return self.tokenize(texts, role).lengths

    def tokenize(self, texts: Sequence[str], role: Role | str) -> Tokenized:
        """The texts as the encoder reads them (the role's prefix added), tokenized once.

        Its ``lengths`` are :meth:`token_counts`; given to :meth:`embed_float` under the same
        role, its tokens are the ones embedded, not encoded again (``ctxemb serve`` counts a
        request's tokens before queueing it, then embeds it).
        """
        return self.source.tokenize(check_texts(texts), Role.parse(role, "role"))

    def embed_float(
        self, texts: Sequence[str], role: Role | str, *, warn: bool = True
    ) -> np.ndarray:
        """The contract's vectors before the precision step (what the stamp's canary holds).

        ``warn=False`` raises no :class:`~ctxemb_core.errors.TruncationWarning`: for texts that
        are not the caller's input (stored records re-embedded to verify an index), whose
        truncation would otherwise be reported as if the caller's own texts were cut.

        ``texts`` may be what :meth:`tokenize` returned for this role: its tokens are embedded,
        not encoded again.
        """
        done = self._embed_checked(texts, role)
        if warn:
            self._warn_truncated(done.truncated, len(texts), stacklevel=3)
        return done.vectors

    def embed_float_counted(self, texts: Sequence[str], role: Role | str) -> Encoded:
        """:meth:`embed_float`, with how many texts were cut to ``max_tokens`` returned beside
        the vectors (:class:`~ctxemb_core.source.Encoded`) and no warning.

        For a caller that shares the embedder between threads (``ctxemb serve``): the count
        is this call's, where :attr:`last_truncated` is whichever call finished last.
        """
        return self._embed_checked(texts, role)

    def _embed_checked(self, texts: Sequence[str], role: Role | str) -> Encoded:
        if not isinstance(texts, Tokenized):
            texts = check_texts(texts)  # public too (stamp, guard): checked here, empty ok
        parsed = Role.parse(role, "role")
        if isinstance(texts, Tokenized) and texts.key != (parsed, self.contract.prefix(parsed)):
            raise InvalidInputError(
                f"these texts were tokenized for another role or embedder than {parsed.value}: "
                "tokenize them with this embedder and this role"
            )
        return self._encode(texts, parsed)

    def _encode(self, texts: list[str] | Tokenized, role: Role) -> Encoded:
        """The source's vectors of ``texts``, without checks or warning; the count it returns is
        kept in :attr:`last_truncated` too, as it always was."""
        plan = BatchPlan(self.batch_size, self.token_budget, self.show_progress)
        done = self.source.encode(texts, role, plan)
        self.last_truncated = done.truncated
        return done

    def _warn_truncated(self, truncated: int, total: int, *, stacklevel: int) -> None:
        self.last_truncated = truncated
        if truncated:
            warnings.warn(
                TruncationWarning(truncated, total, self.contract.max_tokens),
                stacklevel=stacklevel,
            )

    def _plan(
        self, encoder: Encoder, texts: Sequence[str], max_tokens: int | None = None
    ) -> list[np.ndarray]:
        """Index batches of ``texts`` by token length, within the token budget (the token-vector
        calls' plan, the same as the source's)."""
        limit = self.contract.max_tokens if max_tokens is None else max_tokens
        plan = BatchPlan(self.batch_size, self.token_budget, self.show_progress)
        return token_batches(encoder, texts, limit, plan)
