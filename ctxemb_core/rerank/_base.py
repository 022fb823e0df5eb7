"""What every reranker shares: checked inputs, the ordering, results that carry the contract."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ctxemb_core.errors import CtxembError, InvalidInputError
from ctxemb_core.folders.digests import weights_digest
from ctxemb_core.folders.layouts import read_layout
from ctxemb_core.folders.locate import locate_model
from ctxemb_core.rerank.contract import (
    RerankerContract,
    RerankKind,
    ScoreThreshold,
    load_reranker_contract,
)
from ctxemb_core.settings import RunSettings, Setting, check_device
from ctxemb_core.validate import check_positive_int, check_text, check_texts

__all__ = [
    "Ranked",
    "Reranker",
    "Reranking",
    "as_threshold",
    "check_settings",
    "resolve_threshold",
]

_BACKENDS = ("auto", "onnx", "torch")


def _check_backend(value: Any, name: str) -> Any:
    if value not in _BACKENDS:
        raise InvalidInputError(
            f"{name}={value!r} is not known; valid backends are {list(_BACKENDS)}"
        )
    return value


#: The rerankers' run settings (cross-encoder and late interaction alike): what
#: :meth:`Reranker.config`, :meth:`Reranker.config_for` and :func:`check_config` write and read,
#: in order, and what :func:`check_settings` checks.
RERANKER_SETTINGS = RunSettings(
    owner="reranker",
    described="a reranker config",
    source="Reranker.config()",
    located=("contract", "path_hint"),
    settings=(
        Setting("backend", "auto", _check_backend, attribute="requested_backend"),
        Setting("device", "cpu", check_device),
        Setting("batch_size", 32, check_positive_int),
        Setting("token_budget", 4096, check_positive_int),
    ),
)


@dataclass(frozen=True)
class Ranked:
    """One reranked document.

    Attributes:
        index: its position in the input.
        score: its score under the reranker's contract.
        text: the document as given.
        id: its id, when ids were given.
    """

    index: int
    score: float
    text: str
    id: str | None = None


@dataclass(frozen=True)
class Reranking:
    """Documents ordered by score (ties by input order), with the contract that scored them.

    Attributes:
        results: the kept documents, best first.
        contract: the reranker contract; scores are comparable only under it.
        candidates: how many documents were scored.
    """

    results: tuple[Ranked, ...]
    contract: RerankerContract
    candidates: int

    @property
    def fingerprint(self) -> str:
        """The reranker contract's fingerprint, reported with every result."""
        return self.contract.fingerprint

    @property
    def ids(self) -> list[str | None]:
        return [r.id for r in self.results]

    @property
    def indices(self) -> list[int]:
        return [r.index for r in self.results]

    @property
    def scores(self) -> np.ndarray:
        return np.array([r.score for r in self.results], dtype=np.float32)

    def __iter__(self) -> Iterator[Ranked]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, i: int) -> Ranked:
        return self.results[i]


def resolve_threshold(
    threshold: float | ScoreThreshold | Mapping[str, Any] | None, contract: RerankerContract
) -> float | None:
    """A threshold's value under ``contract``.

    A plain number is taken as set under ``contract`` now; a :class:`ScoreThreshold` (or its
    ``to_dict()``) set under another contract raises
    :class:`~ctxemb_core.errors.RerankerMismatchError`.
    """
    if threshold is None:
        return None
    if isinstance(threshold, Mapping):
        threshold = ScoreThreshold.from_dict(threshold)
    if isinstance(threshold, ScoreThreshold):
        return threshold.check(contract)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)):
        raise InvalidInputError(
            f"score_threshold must be a number or a ScoreThreshold, got {type(threshold).__name__}"
        )
    if threshold != threshold:
        raise InvalidInputError("score_threshold must not be NaN")
    return float(threshold)


def as_threshold(
    value: float | ScoreThreshold | Mapping[str, Any] | None, contract: RerankerContract
) -> ScoreThreshold | None:
    """A threshold kept with the contract it was set under, as a component stores it.

    A number is set under ``contract`` now; a :class:`ScoreThreshold` (or its ``to_dict()``) of
    another contract raises :class:`~ctxemb_core.errors.RerankerMismatchError`.
    """
    found = resolve_threshold(value, contract)
    if found is None:
        return None
    if isinstance(value, ScoreThreshold):
        return value
    return ScoreThreshold(found, contract)


def check_settings(backend: Any, device: Any, batch_size: Any, token_budget: Any) -> None:
    """Refuse run settings no reranker can take, before anything is loaded."""
    RERANKER_SETTINGS.check(
        {
            "backend": backend,
            "device": device,
            "batch_size": batch_size,
            "token_budget": token_budget,
        }
    )


class Reranker:
    """The base of the rerankers: one contract, checked inputs, a stable order.

    Subclasses implement :meth:`_scores` (one score per document, in input order) and may add
    keyword inputs (pre-computed token vectors) that :meth:`rerank` passes through.

    Args:
        contract: the :class:`RerankerContract`, its ``to_dict()``, or the path of its JSON.
        path: the model folder, which must hold the contract's weights (other weights are
            refused); if omitted, the model is found from the contract (registered by
            :func:`rerank_contract_for`, bundled).
        backend: ``"auto"`` (ONNX Runtime, else torch with a warning), ``"onnx"`` or ``"torch"``.
        device: where the network runs (``"cpu"``).
        batch_size: the most pairs (or texts) in one forward pass.
        token_budget: the most padded tokens in one forward pass.
        show_progress: a progress bar on long work; ``None`` shows one for 1,000 pairs or more
            when stderr is a terminal.
    """

    #: The run settings :meth:`config` and :meth:`config_for` write, in order.
    run_settings: ClassVar[RunSettings] = RERANKER_SETTINGS

    def __init__(
        self,
        contract: RerankerContract | Mapping[str, Any] | str,
        *,
        path: str | Path | None = None,
        backend: str = "auto",
        device: str = "cpu",
        batch_size: int = 32,
        token_budget: int = 4096,
        show_progress: bool | None = None,
    ) -> None:
        self.contract = load_reranker_contract(contract)
        self.requested_backend = backend
        self.device = device
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.run_settings.check(self.run_settings.of(self))  # before anything is loaded
        self.path = None if path is None else Path(path)
        self.show_progress = show_progress
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.contract.describe()})"

    @property
    def fingerprint(self) -> str:
        """The reranker contract's fingerprint."""
        return self.contract.fingerprint

    # -- serialisation -----------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """JSON-ready settings :func:`reranker_from_config` rebuilds this reranker from."""
        return self.config_for(self.contract, path=self.path, **self.run_settings.of(self))

    @classmethod
    def config_for(
        cls,
        contract: RerankerContract,
        *,
        path: str | Path | None = None,
        **settings: Any,
    ) -> dict[str, Any]:
        """The :meth:`config` of a reranker not built yet (nothing is loaded).

        What a framework component's ``to_dict`` stores: the whole contract, where its model
        folder is on this machine (``path`` as given, else located now; a hint that another
        process uses only if the folder there holds the contract's weights) and the run
        settings of :attr:`run_settings` (``backend``, ``device``, ``batch_size``,
        ``token_budget``; one left out is the constructor's default), checked.
        """
        if not isinstance(contract, RerankerContract):
            raise InvalidInputError(
                f"config_for needs a RerankerContract, got {type(contract).__name__}"
            )
        values = cls.run_settings.complete(settings, "Reranker.config_for")
        cls.run_settings.check(values)
        hint: str | None = None if path is None else str(path)
        if hint is None:
            try:
                hint = str(locate_model(contract.model, contract.weights))
            except CtxembError:
                hint = None  # found from the contract when the reranker is built, or refused
        return {
            "contract": contract.to_dict(),
            "path_hint": hint,
            **values,
        }

    # -- ranking -----------------------------------------------------------------------------

    def score(self, query: str, documents: Sequence[str], **inputs: Any) -> np.ndarray:
        """The score of each document for ``query``, in input order (float32)."""
        query = check_text(query, "query")
        docs = check_texts(documents, "documents", single="wrap a single document in a list")
        if not docs:
            return np.zeros(0, dtype=np.float32)
        return self._scores(query, docs, **inputs)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        top_k: int | None = None,
        score_threshold: float | ScoreThreshold | None = None,
        **inputs: Any,
    ) -> Reranking:
        """Documents ordered by score, best first; ties keep their input order.

        Args:
            query: the query.
            documents: the candidate texts.
            ids: an id per document (reported with each result).
            top_k: keep at most this many.
            score_threshold: keep documents scoring at least this; a :class:`ScoreThreshold`
                must have been set under this reranker's contract.

        Raises:
            InvalidInputError: a query or document that is not text, ids that do not pair
                with the documents, a ``top_k`` that is not a positive integer.
            RerankerMismatchError: a threshold set under another contract.
        """
        query = check_text(query, "query")
        docs = check_texts(documents, "documents", single="wrap a single document in a list")
        keys = _check_ids(ids, len(docs))
        if top_k is not None:
            check_positive_int(top_k, "top_k")
        threshold = resolve_threshold(score_threshold, self.contract)
        scores = self._scores(query, docs, **inputs) if docs else np.zeros(0, np.float32)
        return rank(scores, docs, keys, self.contract, top_k=top_k, threshold=threshold)

    def _scores(self, query: str, documents: list[str], **inputs: Any) -> np.ndarray:
        raise NotImplementedError


def rank(
    scores: np.ndarray,
    documents: Sequence[str],
    ids: Sequence[str] | None,
    contract: RerankerContract,
    *,
    top_k: int | None = None,
    threshold: float | None = None,
) -> Reranking:
    """The :class:`Reranking` of scored documents: best first, ties by input order."""
    scores = np.asarray(scores, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    results = []
    for i in order:
        score = float(scores[i])
        if threshold is not None and not score >= threshold:
            continue
        results.append(Ranked(int(i), score, documents[i], None if ids is None else ids[i]))
        if top_k is not None and len(results) == top_k:
            break
    return Reranking(tuple(results), contract, len(documents))


def _check_ids(ids: Sequence[str] | None, count: int) -> list[str] | None:
    if ids is None:
        return None
    keys = check_texts(ids, "ids", single="wrap a single id in a list")
    if len(keys) != count:
        raise InvalidInputError(f"ids has {len(keys)} items for {count} documents")
    return keys


# Every key of a reranker config, in order (kept under its old name).
CONFIG_KEYS = RERANKER_SETTINGS.keys


def check_config(config: Any) -> tuple[RerankerContract, dict[str, Any]]:
    """The contract and the constructor settings of a :meth:`Reranker.config`."""
    settings = RERANKER_SETTINGS.read(config)
    contract = RerankerContract.from_dict(config["contract"])
    # Where the model was: a folder that is gone, or holds no model now (another machine), is
    # passed over and the model found from the contract (registered, bundled). One that holds
    # a model is the path, whose weights the load checks as it checks any path: other weights
    # there (the folder's files replaced since the config was written) are refused
    # (RerankerMismatchError), never passed over for another copy or a network still in memory.
    hint = config.get("path_hint")
    if isinstance(hint, str) and hint and _holds_a_model(Path(hint), contract):
        settings["path"] = hint
    return contract, settings


def _holds_a_model(folder: Path, contract: RerankerContract) -> bool:
    task = "sequence-classification" if contract.kind is RerankKind.CROSS_ENCODER else None
    try:
        layout = read_layout(folder, task=task) if task else read_layout(folder)
        weights_digest(layout)  # its files are there and readable to their end
        return folder.is_dir()
    except CtxembError:
        return False  # gone, no model folder, or broken: the contract finds the model
