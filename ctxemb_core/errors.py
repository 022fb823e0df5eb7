"""The one error tree of ctxemb.

Every error ctxemb raises on purpose derives from :class:`CtxembError`, so a caller can catch the
whole family in one place, and each carries the context needed to act on it::

    CtxembError
    ├── InvalidInputError (+ ValueError)      bad texts, batches, arguments
    │   ├── InvalidArgumentsError (+ TypeError)
    │   │                                     a call's keywords do not fit: unknown, or two
    │   │                                     that exclude each other (contract= and model=)
    │   └── ExistingIdsError                  ``add`` of ids the index already holds
    ├── InvalidContractError (+ ValueError)   a contract that cannot exist (unknown pooling, …)
    ├── DataFormatError (+ ValueError)        a corpus, qrels or stamp file that cannot be read
    ├── ModelNotFoundError (+ FileNotFoundError)
    │                                         no folder, or a folder without weights (or a
    │                                         server without the model id asked for)
    ├── UnsupportedModelError                 a module graph ctxemb cannot reproduce exactly
    │   ├── MalformedModelError (+ DataFormatError)
    │   │                                     a model folder's file that is not what it claims
    │   └── PickledWeightsError               weights only in a pickle, which ctxemb never loads
    ├── MissingDependencyError (+ ImportError)
    │                                         an optional extra is not installed
    ├── StoreUnavailableError (+ ConnectionError)
    │                                         a store's server or folder cannot be used
    ├── RemoteEncoderError (+ ConnectionError)
    │                                         an embedding server cannot be reached or
    │                                         answers what no embedding server should
    ├── IncompleteWriteError                  a failed write could not be fully undone
    └── StampError                            the index and the caller disagree
        ├── MissingStampError                 the index (or a document) carries no stamp
        ├── DamagedStampError (+ DataFormatError)
        │                                     a stamp that cannot be read or is inconsistent
        ├── ContractMismatchError             the fingerprints differ (names each field, or
        │                                     both fingerprints when only those are known)
        ├── ConfigurationMismatchError        the store's own embedding setting disagrees
        ├── StorageMismatchError              the store holds vectors in a form the stamp's
        │                                     contract does not make (a column's type)
        ├── EncoderDriftError                 same contract on paper, other vectors in fact
        ├── ForeignVectorsError               stored vectors that this contract did not make
        ├── StampMovedError                   the stamp changed between the guard's check and
        │                                     a write; nothing was written
        ├── UnfinishedCopyError               a copy (a migration) stopped before its last
        │                                     record: not served until it is finished
        └── RerankerMismatchError             a score, threshold or token vectors of another
                                              reranker contract

    CtxembWarning (UserWarning)
    └── TruncationWarning                     texts were cut to the contract's max_tokens

Advice in the caller's terms: an error with a next step carries it as data, ``err.remedies``
(:class:`~ctxemb_core.remedy.Remedy`: a neutral step and its parameters, the best first), and
each interface words it. ``str(err)`` names Python calls of the store adapter the
error came through (``ctxemb_pgvector.restamp(...)``: the adapter sets its
:class:`~ctxemb_core.remedy.StoreTerms` with :meth:`CtxembError.in_terms_of`; the default
store's, Chroma's, otherwise). The ``ctxemb`` command words the same remedies with the options
of the command that was run (:mod:`ctxemb_core.cli.advice`); ``err.message_for("cli")`` gives
them for the command line in general. Errors whose advice is not yet data give both texts
(``cli=``); for every other error the message is ``str(err)``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ctxemb_core.remedy import (
    DEFAULT_TERMS,
    Remedy,
    Step,
    StoreTerms,
    cli_advice,
    python_advice,
    repair_calls,
)

if TYPE_CHECKING:
    from ctxemb_core.contract import ContractDiff, EmbeddingContract, FieldChange

# Audience and AUDIENCES are importable too; __all__ lists the error tree alone.
__all__ = [
    "AliasConflictError",
    "AliasError",
    "AliasMovedError",
    "AliasStateError",
    "AnalyzerDriftError",
    "ConfigurationMismatchError",
    "ContractMismatchError",
    "CtxembError",
    "CtxembWarning",
    "DamagedAliasError",
    "DamagedStampError",
    "DataFormatError",
    "EncoderDriftError",
    "ExistingIdsError",
    "ForeignVectorsError",
    "GateFailedError",
    "HybridMismatchError",
    "IncompleteWriteError",
    "InvalidArgumentsError",
    "InvalidContractError",
    "InvalidInputError",
    "MalformedModelError",
    "MissingDependencyError",
    "MissingStampError",
    "ModelNotFoundError",
    "NoEncoderError",
    "OutOfStepError",
    "PickledWeightsError",
    "RemoteEncoderError",
    "RerankerMismatchError",
    "StampError",
    "StampMovedError",
    "StorageMismatchError",
    "StoreUnavailableError",
    "TextNotStoredError",
    "TruncationWarning",
    "UnfinishedCopyError",
    "UnknownAliasError",
    "UnsupportedModelError",
]

# A contract fingerprint: the sha256 hex digest of its canonical JSON.
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")


#: Who reads an error's message: a Python caller, or a user of the ``ctxemb`` command.
Audience = Literal["python", "cli"]
AUDIENCES: tuple[Audience, ...] = ("python", "cli")


class CtxembError(Exception):
    """Root of every error ctxemb raises on purpose.

    Args:
        *args: the message (for a Python caller), as for any exception. With ``remedies``, the
            message says what is wrong, and the advice is worded from the remedies.
        cli: the message for a user of the ``ctxemb`` command, when its advice differs (flags
            instead of Python calls); :meth:`message_for` returns it.
        remedies: what to do next, as data (:class:`~ctxemb_core.remedy.Remedy`), best first;
            ``str(err)`` words them as Python calls, the ``ctxemb`` command as its options.

    Attributes:
        remedies: the next steps as data (``()`` when the message is all there is).
        terms: the :class:`~ctxemb_core.remedy.StoreTerms` of the store adapter the error came
            through (set by that adapter, see :meth:`in_terms_of`), or ``None``: the default
            store's.

    Example:
        >>> err = ModelNotFoundError("... contract_for(path, name=m)", cli="... --name m")
        >>> err.message_for("cli")
        '... --name m'
    """

    remedies: tuple[Remedy, ...] = ()
    terms: StoreTerms | None = None

    def __init__(self, *args: Any, cli: str | None = None, remedies: Sequence[Remedy] = ()):
        super().__init__(*args)
        self._cli = cli
        if remedies:
            self.remedies = tuple(remedies)
            self._worded = True  # the advice is the remedies', worded when shown

    @property
    def problem(self) -> str:
        """What is wrong, without the advice (the whole message for an error without
        remedies)."""
        return str(self.args[0]) if self.args else ""

    def in_terms_of(self, terms: StoreTerms) -> CtxembError:
        """Word the advice in ``terms`` (a store adapter's), unless an adapter already did:
        the innermost adapter the error passed through names the store. An outer framework
        adapter over that store adds its own way to adopt (``terms.frameworks``), which a store
        adapter's words leave out."""
        if self.terms is None:
            self.terms = terms
        elif terms.frameworks and not self.terms.frameworks and terms.module == self.terms.module:
            self.terms = self.terms.adopting_in(terms.frameworks)
        return self

    def _worded_as(self, advice: str) -> str:
        """The message with ``advice`` (a subclass adds what follows the advice)."""
        return f"{self.problem}{advice}"

    def __str__(self) -> str:
        if getattr(self, "_worded", False):
            return self._worded_as(python_advice(self.remedies, self.terms))
        return super().__str__()

    def message_for(self, audience: Audience) -> str:
        """The message with its advice in ``audience``'s terms (``str(self)`` for Python).

        For the command line this is the advice for the ``ctxemb`` command in general; a
        command words the remedies with its own options (:mod:`ctxemb_core.cli.advice`).

        Raises:
            InvalidInputError: an audience that is not one of :data:`AUDIENCES`.
        """
        if audience not in AUDIENCES:
            raise InvalidInputError(
                f"audience={audience!r} is not valid; valid values are "
                + ", ".join(repr(a) for a in AUDIENCES)
            )
        if audience == "cli" and getattr(self, "_worded", False):
            return self._worded_as(cli_advice(self.remedies, self.terms))
        cli = getattr(self, "_cli", None)  # unset where a subclass skips __init__
        if audience == "cli" and cli is not None:
            return str(cli)
        return str(self)

    def _state(self) -> dict[str, Any]:
        """What a rebuilt copy needs beside its arguments: the adapter's terms."""
        return {"terms": self.terms} if self.terms is not None else {}


@contextlib.contextmanager
def worded(terms: StoreTerms | None) -> Iterator[None]:
    """The block's ctxemb errors give their advice in ``terms`` (:meth:`CtxembError.in_terms_of`;
    ``None``: as they are): the one way every adapter, facade and tool words what it raises in
    the store and interface its caller called."""
    try:
        yield
    except CtxembError as exc:
        if terms is not None:
            exc.in_terms_of(terms)
        raise


class InvalidInputError(CtxembError, ValueError):
    """An argument or input text is not acceptable (``None``, not a string, an empty batch, …)."""


class InvalidArgumentsError(InvalidInputError, TypeError):
    """A call's arguments do not fit together: an unknown keyword, a required one missing, or
    two that exclude each other (``contract=`` and ``model=``). A ``TypeError`` as Python's own
    for a wrong signature, and an :class:`InvalidInputError`; the message names the fix."""


class ExistingIdsError(InvalidInputError):
    """``add`` was given ids the index already holds; nothing was written.

    Attributes:
        ids: the ids that are already present.
    """

    def __init__(self, ids: tuple[str, ...]) -> None:
        self.ids = tuple(ids)
        shown = ", ".join(repr(i) for i in self.ids[:5]) + (" …" if len(self.ids) > 5 else "")
        super().__init__(
            f"{len(self.ids)} ids are already in the index ({shown}); add never replaces a "
            "record, so nothing was written. Use upsert to replace them, or leave them out."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.ids,))


class InvalidContractError(CtxembError, ValueError):
    """A contract field has a value no contract may have; the message lists the valid values."""


class DataFormatError(CtxembError, ValueError):
    """A file or JSON document does not have the expected format; the message names where."""


class ModelNotFoundError(CtxembError, FileNotFoundError):
    """A model folder does not exist, or exists without weights or a tokenizer; or an embedding
    server serves the contract asked for, but not under the model id asked for."""


class UnsupportedModelError(CtxembError):
    """The model's module graph has a part ctxemb cannot reproduce exactly, so it refuses it."""


class MalformedModelError(UnsupportedModelError, DataFormatError):
    """A file of a model folder is not what its format says, so the folder is refused.

    A model folder is untrusted input: a JSON file of the wrong shape or size, a value of the
    wrong type, or a module path that leaves the folder is refused here, by name, before
    anything loads it. Catch it as :class:`UnsupportedModelError` or :class:`DataFormatError`.
    """


class PickledWeightsError(UnsupportedModelError):
    """A model folder keeps its weights only in a pickle, which ctxemb never loads.

    Unpickling can run any code the file names, so ctxemb reads safetensors only.

    Attributes:
        folder: the folder whose weights are pickled.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = os.fspath(folder)
        super().__init__(
            f"{self.folder} keeps its weights only as a pickle (pytorch_model.bin), and ctxemb "
            "never unpickles a model folder (a pickle can run any code it names). Convert it "
            "once, where you trust the file, to safetensors: for the network, "
            "AutoModel.from_pretrained(folder).save_pretrained(folder); for a Dense head, "
            "safetensors.torch.save_file(torch.load('pytorch_model.bin', weights_only=True), "
            "'model.safetensors') in its folder."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.folder,))


class MissingDependencyError(CtxembError, ImportError):
    """An optional dependency is missing; the message says which ``pip install`` fixes it."""

    @classmethod
    def require(cls, adapter: str, extra: str, modules: Mapping[str, str]) -> None:
        """Check that what adapter ``adapter`` needs is installed (``modules``: import name ->
        the package that gives it), or raise this error naming the packages and the extra that
        installs them: the first step of every adapter package, worded once. Nothing is
        imported (``importlib.util.find_spec``): a store adapter imports its client library on
        first use (:func:`ctxemb_core.lazy.lazy_package`).

        Example:
            >>> MissingDependencyError.require("ctxemb_x", "x", {"json": "json"})
        """
        import importlib.util

        for name in modules:
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError) as exc:
                raise cls(
                    f"{adapter} needs {' and '.join(modules.values())}: pip install "
                    f"'ctxemb[{extra}]'"
                ) from exc
            if not found:
                needs = " and ".join(modules.values())
                raise cls(f"{adapter} needs {needs}: pip install 'ctxemb[{extra}]'")


class StoreUnavailableError(CtxembError, ConnectionError):
    """A store's server cannot be reached, or its folder cannot be used; nothing was changed."""


class RemoteEncoderError(CtxembError, ConnectionError):
    """An embedding server cannot be reached, or its answer is not one an embedding server gives
    (not JSON, vectors of the wrong count or width); nothing was returned from it."""


class IncompleteWriteError(CtxembError):
    """A write failed and undoing it failed too: the index may hold part of the write.

    Attributes:
        error: the error that failed the write.
        undo_error: the error that failed the undo.
        ids: the ids whose records may differ from their state before the call.
    """

    def __init__(self, error: BaseException, undo_error: BaseException, ids: tuple[str, ...]):
        self.error = error
        self.undo_error = undo_error
        self.ids = tuple(ids)
        shown = ", ".join(repr(i) for i in self.ids[:5]) + (" …" if len(self.ids) > 5 else "")
        super().__init__(
            f"the write failed ({type(error).__name__}: {error}) and undoing it failed too "
            f"({type(undo_error).__name__}: {undo_error}); the records of {len(self.ids)} ids "
            f"may differ from before the call ({shown}). Run the same write again once the "
            "store is reachable (it is idempotent), or verify the index."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.error, self.undo_error, self.ids))


class StampError(CtxembError):
    """The index's stamp and the caller's embedder disagree; nothing was written or returned."""


class StampMovedError(StampError):
    """The stamp changed between the guard's check and a write; nothing was written.

    Raised by a store driver's ``write`` / ``delete`` (:class:`~ctxemb_core.index.StoreDriver`)
    given a ``stamp_version`` that is no longer the index's. The guard verifies the new stamp and
    tries once more; a caller sees it only when the stamp keeps changing.
    """


class UnfinishedCopyError(StampError):
    """The index is a copy whose migration stopped before its last record (interrupted, or
    failed): its stamp says so, and it is not opened until a migration finishes it.

    Attributes:
        index: the index's name.
        source: the index it copies (its name and store).
    """

    def __init__(self, index: str, source: str, *, kind: str = "index", call: str = "") -> None:
        self.index = index
        self.source = source
        what = (
            f"{kind} {index!r} is an unfinished copy of {source}: a migration into it stopped "
            "before its last record, so it is not served as if it were whole. Run the same "
            "migration again to finish it (it takes up where it stopped"
        )
        python = f"{call}(source, contract, {index!r})" if call else "migrate"
        super().__init__(
            f"{what}: {python}), or drop it.",
            cli=f"{what}: the same ctxemb migrate, with --to {index}), or drop it.",
        )


class MissingStampError(StampError):
    """The index carries no ctxemb stamp, so nothing proves which contract wrote it."""


def unstamped_remedies(name: str | None = None) -> tuple[Remedy, ...]:
    """The next steps for an unstamped index: adopt it (a sample of its records is re-embedded,
    and it is stamped only if they are the contract's vectors), or find its contract first."""
    return (Remedy.of(Step.ADOPT, name=name), Remedy.of(Step.DETECT, name=name))


def unstamped_advice(name: str | None = None) -> tuple[str, str]:
    """The next step for an unstamped collection: (for Python, for the ``ctxemb`` command),
    worded in the default store's terms (see :func:`unstamped_remedies` for the data)."""
    remedies = unstamped_remedies(name)
    return python_advice(remedies), cli_advice(remedies)


class DamagedStampError(StampError, DataFormatError):
    """The index carries a stamp that cannot be read or contradicts itself (never a clean pass)."""


class ContractMismatchError(StampError):
    """The caller's contract is not the one the index (or a stored document) was written with.

    Two forms. With both contracts (the index's stamp holds its contract) every differing field
    is named. With :meth:`from_fingerprints`, when only the index's fingerprint is known (a
    document that carries ``ctxemb_fingerprint`` and nothing else), no field can be named: the
    message gives both fingerprints, and ``fields`` is ``("fingerprint",)``.

    Attributes:
        index: the contract recorded in the index's stamp, or ``None`` when only its fingerprint
            is known.
        caller: the contract of the embedder that tried to use the index, or ``None`` when only
            its fingerprint is known.
        index_fingerprint: the fingerprint of the index's contract (known in both forms).
        caller_fingerprint: the fingerprint of the caller's contract (known in both forms).
        diff: the full :class:`~ctxemb_core.contract.ContractDiff` (``diff.kind`` says whether
            only the query side changed or the documents must be re-embedded). When only the
            fingerprint is known it holds one change, ``fingerprint`` (both full fingerprints),
            of kind ``reembed``: nothing proves the stored vectors valid for this caller.
        fields: the names of the differing fields, in contract field order, or
            ``("fingerprint",)`` when only the fingerprint is known; never empty.
        documents: the ids (``str``) or positions (``int``) of the stored documents found
            carrying the index's contract, when the mismatch was found on documents; else ``()``.
        folder: set when no index is involved: the model folder found for the contract
            (``index``) holds other weights (``caller`` has the folder's digest).
        server: set when no index is involved: the URL of an embedding server that serves
            another contract (``index``: the server's, ``caller``: the one it was asked for).
        served_models: a server of several contracts (``ctxemb serve --also``): the model ids it
            serves, none of them ``caller``'s contract; ``()`` for a server of one.
        served_model: with ``served_models``, the id whose contract is ``index`` (the nearest
            to ``caller``: the fewest fields apart).
        target: set when the index is a migration's target that exists under another
            contract (its name): the advice is another name, never a re-stamp.
        stamped: the index carries a stamp (a Chroma collection's metadata), so a query-side
            change can be accepted by re-stamping it (:func:`ctxemb_chroma.restamp`); the advice
            says so only then (a store with a fingerprint per document cannot be re-stamped).
    """

    def __init__(
        self,
        index: EmbeddingContract,
        caller: EmbeddingContract,
        *,
        documents: Sequence[str | int] = (),
        stamped: bool = False,
        folder: str | os.PathLike[str] | None = None,
        server: str | None = None,
        served_models: Sequence[str] = (),
        served_model: str | None = None,
        target: str | None = None,
        instance: str | None = None,
    ) -> None:
        self.folder: str | None = None if folder is None else os.fspath(folder)
        self.server: str | None = server
        #: The ``ctxemb serve`` process (its instance id) that answered, behind a balancer one
        #: replica of several at ``server`` (``None``: a server that names none).
        self.instance: str | None = instance
        self.served_models: tuple[str, ...] = tuple(served_models)
        self.served_model: str | None = served_model
        self.index: EmbeddingContract | None = index
        self.caller: EmbeddingContract | None = caller
        self.index_fingerprint: str = index.fingerprint
        self.caller_fingerprint: str = caller.fingerprint
        self.diff: ContractDiff = index.diff(caller)
        self.fields: tuple[str, ...] = tuple(c.field for c in self.diff.changes)
        self.documents: tuple[str | int, ...] = tuple(documents)
        self.stamped: bool = bool(stamped) and not self.documents
        if self.folder is not None:
            # No index involved: the folder found for the contract holds another network.
            super().__init__(
                _folder_problem(self.diff.changes, self.folder),
                remedies=_folder_remedies(self.folder),
            )
            return
        if server is not None:
            super().__init__(
                _server_problem(
                    self.diff.changes, server, self.served_models, served_model, instance
                ),
                remedies=_server_remedies(self.diff, caller, server, self.served_models),
            )
            return
        if target is not None:
            # A migration's target that exists under another contract: someone else's index,
            # never to be re-stamped or re-embedded for this copy.
            problem = (
                f"the target {target!r} already holds an index of another contract ("
                + "; ".join(
                    f"{c.field}: index={c.index!r}, caller={c.caller!r}" for c in self.diff.changes
                )
                + "); a migration writes a new index under its own contract (or takes up a "
                "copy of its own) and never writes into another's"
            )
            super().__init__(
                f"{problem}: give migrate another new name, or drop {target!r} first.",
                cli=f"{problem}: give another --to, or drop {target!r} first.",
            )
            return
        super().__init__(
            _mismatch_problem(self.diff.changes, self.diff.kind.value),
            remedies=_mismatch_remedies(self.diff, self.stamped, index.model),
        )

    def answered_by(self, instance: str) -> ContractMismatchError:
        """This refusal of a server's contract as replica ``instance`` gave it: another
        ``ctxemb serve`` process of the same other contract behind one URL is named for itself
        (``self`` where no instance was named, or it is that one)."""
        if self.instance in (None, instance) or self.index is None or self.caller is None:
            return self
        return type(self)(
            self.index,
            self.caller,
            server=self.server,
            served_models=self.served_models,
            served_model=self.served_model,
            instance=instance,
        )

    def _worded_as(self, advice: str) -> str:
        return f"{self.problem}{advice}{_documents_line(self.documents)}"

    @classmethod
    def from_fingerprints(
        cls,
        index_fingerprint: str | EmbeddingContract,
        caller: EmbeddingContract | str,
        *,
        documents: Sequence[str | int] = (),
    ) -> ContractMismatchError:
        """The mismatch when one side is known only by its fingerprint.

        Usually the index's side (a document carries ``ctxemb_fingerprint`` and nothing else);
        a framework that passes only a fingerprint from its query embedder to its retriever may
        know the index's contract (a stamp) and not the caller's, or neither.

        Args:
            index_fingerprint: the full fingerprint (64 hex digits) the index or document
                carries, or the index's contract when only the caller's fingerprint is known.
            caller: the caller's contract, or its fingerprint.
            documents: ids or positions of the documents that carry the index's fingerprint.

        Raises:
            InvalidInputError: a fingerprint that is not one, or both sides contracts.

        Example:
            >>> err = ContractMismatchError.from_fingerprints("ab" * 32, contract)  # doctest: +SKIP
            >>> err.index is None, err.fields  # doctest: +SKIP
            (True, ('fingerprint',))
        """
        from ctxemb_core.contract import ContractDiff, DiffKind, EmbeddingContract, FieldChange

        index = index_fingerprint if isinstance(index_fingerprint, EmbeddingContract) else None
        known = caller if isinstance(caller, EmbeddingContract) else None
        if index is not None and known is not None:
            raise InvalidInputError(
                "both contracts are known: raise ContractMismatchError(index, caller), which "
                "names the differing fields"
            )
        fingerprints: list[str] = []
        for name, value in (("index_fingerprint", index_fingerprint), ("caller", caller)):
            if isinstance(value, EmbeddingContract):
                value = value.fingerprint
            if not isinstance(value, str) or not _FINGERPRINT.fullmatch(value):
                raise InvalidInputError(
                    f"{name} must be a contract fingerprint (64 lowercase hex digits) or a "
                    f"contract, got {value!r}"
                )
            fingerprints.append(value)
        err = cls.__new__(cls)
        err.index = index
        err.caller = known
        err.index_fingerprint, err.caller_fingerprint = fingerprints
        change = FieldChange("fingerprint", fingerprints[0], fingerprints[1])
        err.diff = ContractDiff((change,), DiffKind.REEMBED)
        err.fields = ("fingerprint",)
        err.documents = tuple(documents)
        err.stamped = False
        err.folder = None
        err.server = None
        err.served_models = ()
        err.served_model = None
        err.remedies = (
            Remedy.of(Step.USE_INDEX_CONTRACT, fields=err.fields),
            Remedy.of(Step.REEMBED, fields=err.fields),
        )
        StampError.__init__(
            err,
            _fingerprint_message(
                *fingerprints, index_known=index is not None, caller_known=known is not None
            )
            + _documents_line(err.documents),
        )
        return err

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle their args by default; ours are rebuilt from the contracts (or the
        # index's fingerprint alone), so every attribute comes back, not just the message.
        return (
            _rebuild_mismatch,
            (
                type(self),
                self.index,
                self.index_fingerprint,
                self.caller if self.caller is not None else self.caller_fingerprint,
                self.documents,
                self.fields == ("fingerprint",),
                getattr(self, "stamped", False),
                getattr(self, "folder", None),
                getattr(self, "server", None),
                getattr(self, "served_models", ()),
                getattr(self, "served_model", None),
                getattr(self, "instance", None),
            ),
            self._state(),
        )


def _rebuild_mismatch(
    cls: type[ContractMismatchError],
    index: EmbeddingContract | None,
    index_fingerprint: str,
    caller: EmbeddingContract | str,
    documents: tuple[str | int, ...],
    by_fingerprint: bool = False,
    stamped: bool = False,
    folder: str | None = None,
    server: str | None = None,
    served_models: tuple[str, ...] = (),
    served_model: str | None = None,
    instance: str | None = None,
) -> ContractMismatchError:
    if index is None:
        return cls.from_fingerprints(index_fingerprint, caller, documents=documents)
    if isinstance(caller, str) or by_fingerprint:
        return cls.from_fingerprints(index, caller, documents=documents)
    return cls(
        index,
        caller,
        documents=documents,
        stamped=stamped,
        folder=folder,
        server=server,
        served_models=served_models,
        served_model=served_model,
        instance=instance,
    )


class HybridMismatchError(ContractMismatchError):
    """The caller's lexical recipe or fusion is not the one a hybrid index was built with.

    Raised for changes on the lexical or fusion side; a dense-side change is the dense guard's
    :class:`ContractMismatchError`, as for any index. Catching ``ContractMismatchError`` catches
    both.

    Attributes:
        index: the index's :class:`~ctxemb_core.hybrid.HybridContract` (its stamp).
        caller: the caller's hybrid contract.
        diff: the :class:`~ctxemb_core.hybrid.HybridDiff` (``diff.kind`` says whether only the
            query side changed or the lexical side must be rebuilt).
        fields: the differing fields, each named with its side (``lexical.stemmer``,
            ``fusion.k``); never empty.
        where: the index refused (its name), for the message.
    """

    def __init__(self, index: Any, caller: Any, *, where: str = "the index") -> None:
        self.index = index
        self.caller = caller
        self.where = where
        self.index_fingerprint = index.fingerprint
        self.caller_fingerprint = caller.fingerprint
        self.diff = index.diff(caller)
        self.fields = tuple(c.field for c in self.diff.changes)
        self.documents = ()
        self.stamped = True
        self.folder = None
        self.server = None
        lines = [f"  {c.field}: index={c.index!r}, caller={c.caller!r}" for c in self.diff.changes]
        lexical = self.diff.kind.value == "lexical_reindex"
        side = "lexical" if lexical else "fusion"
        lead = (
            "The lexical side was built under another recipe. "
            if lexical
            else "Only the query side differs (nothing stored changes). "
        )
        ours = {c.field.split(".", 1)[-1]: c.caller for c in self.diff.changes}
        StampError.__init__(
            self,
            f"hybrid contract mismatch: {where} was built under another hybrid contract "
            f"({self.diff.kind.value}); nothing was returned.\n" + "\n".join(lines) + "\n" + lead,
            remedies=(
                Remedy.of(Step.USE_INDEX_CONTRACT, fields=self.fields, hybrid=side),
                Remedy.of(
                    Step.REBUILD_LEXICAL if lexical else Step.SET_FUSION, fields=self.fields, **ours
                ),
            ),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        args = (type(self), self.index, self.caller, self.where)
        return (_rebuild_hybrid_mismatch, args, self._state())

    def _worded_as(self, advice: str) -> str:
        return f"{self.problem}{advice}"


def _rebuild_hybrid_mismatch(
    cls: type[HybridMismatchError], index: Any, caller: Any, where: str
) -> HybridMismatchError:
    return cls(index, caller, where=where)


class OutOfStepError(StampError):
    """The two sides of a hybrid index do not hold the same documents.

    The dense and the lexical side are written from one corpus pass and updated together; a
    document on one side only, or with another text on each side, means a write reached one
    side and not the other (an interrupted run, or a write around the hybrid guard). Nothing is
    returned until they agree again: ``ctxemb index --hybrid`` (or ``refresh()``) rebuilds the
    lexical side from the dense side's stored texts.

    Attributes:
        where: the index (its name).
        only_dense: ids stored on the dense side only.
        only_lexical: ids stored on the lexical side only.
        changed: ids whose text differs between the sides.
        counts: ``(dense, lexical)`` document counts when only the counts were compared.
    """

    def __init__(
        self,
        where: str,
        only_dense: Sequence[str],
        only_lexical: Sequence[str],
        changed: Sequence[str],
        *,
        counts: tuple[int, int] | None = None,
    ) -> None:
        self.where = where
        self.only_dense = tuple(only_dense)
        self.only_lexical = tuple(only_lexical)
        self.changed = tuple(changed)
        self.counts = counts
        parts = []
        for label, ids in (
            ("on the dense side only", self.only_dense),
            ("on the lexical side only", self.only_lexical),
            ("with another text on each side", self.changed),
        ):
            if ids:
                shown = ", ".join(repr(i) for i in ids[:5]) + (" …" if len(ids) > 5 else "")
                parts.append(f"  {len(ids)} {label}: {shown}")
        if counts is not None:
            parts.append(f"  {counts[0]} documents on the dense side, {counts[1]} on the lexical")
        super().__init__(
            f"the dense and lexical sides of {where} are out of step; nothing was returned.\n"
            + "\n".join(parts)
            + "\nA write reached one side only (an interrupted run, or a write that bypassed "
            "the hybrid index). ",
            remedies=(Remedy.of(Step.REFRESH),),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_out_of_step,
            (type(self), self.where, self.only_dense, self.only_lexical, self.changed, self.counts),
            self._state(),
        )


def _rebuild_out_of_step(
    cls: type[OutOfStepError],
    where: str,
    only_dense: Sequence[str],
    only_lexical: Sequence[str],
    changed: Sequence[str],
    counts: tuple[int, int] | None,
) -> OutOfStepError:
    return cls(where, only_dense, only_lexical, changed, counts=counts)


class ConfigurationMismatchError(StampError):
    """The store's own record of how to embed queries disagrees with the index's stamp.

    A store that embeds queries itself (Chroma's persisted embedding-function configuration, used
    by a raw ``get_collection``) was changed around ctxemb: its raw clients would embed queries
    under another recipe, or with another embedding function altogether.

    Attributes:
        stored: what the store says (``"ctxemb"`` with a contract, or another function's name).
        fields: the differing contract fields when the store names a ctxemb contract, else ``()``.
    """

    def __init__(self, stored: str, fields: tuple[str, ...], detail: str) -> None:
        self.stored = stored
        self.fields = tuple(fields)
        self.detail = detail
        super().__init__(
            f"the store's embedding-function configuration disagrees with the index's stamp: "
            f"{detail}. Raw clients of the store would embed queries under it. ",
            remedies=(Remedy.of(Step.REPAIR_SETTING, fields=self.fields),),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stored, self.fields, self.detail), self._state())


class StorageMismatchError(StampError):
    """The store keeps the index's vectors in a form its stamp's contract does not make.

    A store whose vectors have a declared type (PostgreSQL's ``vector(384)`` column) records
    beside the stamp what that type is; a column altered around ctxemb (``halfvec``, another
    width) would hold rounded or cut vectors that a contract check on paper would pass.

    Attributes:
        fields: what differs (``column``, ``operator``, ...).
        stored: what the store has, by field.
        expected: what the stamp's contract stores, by field.
    """

    def __init__(
        self,
        name: str,
        stored: dict[str, Any],
        expected: dict[str, Any],
        advice: str = "",
        cli_advice: str | None = None,
    ) -> None:
        self.name = name
        self.stored = dict(stored)
        self.expected = dict(expected)
        self.fields = tuple(sorted(k for k in expected if stored.get(k) != expected[k]))
        self.advice, self.cli_advice = advice, cli_advice
        shown = "; ".join(
            f"{k}: store={stored.get(k)!r}, stamp={expected[k]!r}" for k in self.fields
        )
        problem = (
            f"{name} stores its vectors in another form than its stamp's contract makes "
            f"({shown}); its vectors would not be the contract's."
        )
        cli = None if cli_advice is None else f"{problem} {cli_advice}"
        super().__init__(f"{problem} {advice}".rstrip(), cli=cli)

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.name, self.stored, self.expected, self.advice, self.cli_advice)
        return (type(self), args)


class EncoderDriftError(StampError):
    """The contract matches, but the encoder no longer reproduces the index's canary vectors.

    Same contract on paper, different vectors in fact: a changed library version, a lossy
    backend or altered weights that kept their digest.

    Attributes:
        min_cosine: the lowest cosine between a stored canary vector and its re-embedding.
        tolerance: the cosine below which the check fails.
        probe: the probe text (and role) with the lowest cosine.
    """

    def __init__(
        self,
        min_cosine: float,
        tolerance: float,
        probe: str,
        server: str | None = None,
        instance: str | None = None,
    ) -> None:
        self.min_cosine = min_cosine
        self.tolerance = tolerance
        self.probe = probe
        #: The URL of the embedding server that failed the canary, or ``None`` (a local encoder).
        self.server = server
        #: The ``ctxemb serve`` process that failed it (behind a balancer, one replica of
        #: several at ``server``), or ``None``.
        self.instance = instance
        if server is not None:
            super().__init__(
                f"encoder drift: the embedding server at {server}{_replica(instance)} re-embeds "
                f"the canary probe {probe!r} with cosine {min_cosine:.6f} to the contract's "
                f"canary vector (tolerance {tolerance}). It serves other vectors than the "
                "contract's (another model, pooling or truncation behind the same URL), so no "
                "vector was returned from it; every call checks it again until it reproduces the "
                "canary."
            )
            return
        super().__init__(
            f"encoder drift: the canary probe {probe!r} re-embeds with cosine {min_cosine:.6f} "
            f"to the vector stored in the index (tolerance {tolerance}). The contract matches but "
            "this encoder produces other vectors: check the library versions, the backend and the "
            "weights, or re-embed the index with this encoder under a new contract."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        drift = (self.min_cosine, self.tolerance, self.probe, self.server, self.instance)
        return (type(self), drift)


class AnalyzerDriftError(EncoderDriftError):
    """The lexical recipe matches, but this machine's analyzer makes other terms than the
    index's: the analyzer canary (the terms of fixed probe texts, stamped) differs, or the
    installed stop-word list is not the one the recipe pins (a PyStemmer or bm25s upgrade).

    Attributes:
        found: what this machine gives (the canary or stop-word digest).
        expected: what the stamp or recipe records.
    """

    def __init__(self, message: str, *, found: str, expected: str, cli: str | None = None) -> None:
        self.found = found
        self.expected = expected
        self.min_cosine = None  # type: ignore[assignment]
        self.tolerance = None  # type: ignore[assignment]
        self.probe = None  # type: ignore[assignment]
        self.server = None
        self.instance = None
        StampError.__init__(self, message, cli=cli)

    def __reduce__(self) -> tuple[Any, ...]:
        drift = (type(self), str(self), self.found, self.expected, self._cli)
        return (_rebuild_analyzer_drift, drift)


def _rebuild_analyzer_drift(
    cls: type[AnalyzerDriftError], message: str, found: str, expected: str, cli: str | None = None
) -> AnalyzerDriftError:
    return cls(message, found=found, expected=expected, cli=cli)


#: The Python calls that re-embed records a raw client wrote into a stamped Chroma collection,
#: as :class:`ForeignVectorsError` gives them (``client``, ``name`` and ``contract`` are the
#: caller's); a test runs them as printed.
FOREIGN_REPAIR = repair_calls(DEFAULT_TERMS)


class ForeignVectorsError(StampError):
    """Stored vectors in a stamped index were not made under its contract.

    The stamp and canary agree, but re-embedding a sample of stored documents does not give their
    stored vectors back: something wrote into the index around ctxemb (a raw client with another
    embedding function, a hand-made upsert).

    Attributes:
        ids: the checked ids whose stored vectors disagree.
        sample_size: how many records were checked.
        min_cosine: the lowest agreement (cosine, length-aware) found.
        untexted: how many of ``ids`` have a vector but no text to re-embed.
    """

    def __init__(
        self, ids: tuple[str, ...], sample_size: int, min_cosine: float, untexted: int = 0
    ) -> None:
        self.ids = tuple(ids)
        self.sample_size = sample_size
        self.min_cosine = min_cosine
        self.untexted = untexted
        shown = ", ".join(self.ids[:5]) + (" …" if len(self.ids) > 5 else "")
        without = (
            f"; {untexted} of them have a vector but no text, which ctxemb never writes"
            if untexted
            else ""
        )
        found = (
            f"{len(self.ids)} of {sample_size} checked records carry vectors that this "
            f"contract did not make (lowest agreement {min_cosine:.4f}; ids {shown}{without}). "
            "Something wrote into the index around ctxemb, so it is not opened with its record "
            "sample."
        )
        super().__init__(
            f"{found} ",
            remedies=(
                Remedy.of(Step.REPAIR, ids=self.ids),
                Remedy.of(Step.MIGRATE),
                Remedy.of(Step.VERIFY_ALL),
            ),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        args = (self.ids, self.sample_size, self.min_cosine, self.untexted)
        return (type(self), args, self._state())


class RerankerMismatchError(StampError):
    """Scores, a score threshold or stored token vectors of another reranker contract.

    Rerank scores are only comparable under one :class:`~ctxemb_core.rerank.RerankerContract`:
    a threshold set under one contract means nothing under another, and token vectors stored
    under one are not the vectors of another.

    Attributes:
        expected: the contract the threshold, scores or vectors were made under.
        caller: the reranker's contract.
        diff: the :class:`~ctxemb_core.contract.ContractDiff` between them.
        fields: the names of the differing fields.
        what: what was refused (``"a score threshold"``, ``"stored token vectors"``, …).
    """

    def __init__(self, expected: Any, caller: Any, *, what: str = "scores") -> None:
        self.expected = expected
        self.caller = caller
        self.what = what
        self.diff: ContractDiff = expected.diff(caller)
        self.fields: tuple[str, ...] = tuple(c.field for c in self.diff.changes)
        lines = [
            f"  {c.field}: expected={c.index!r}, caller={c.caller!r}" for c in self.diff.changes
        ]
        if "threshold" in what:
            advice = (
                "Scores are comparable only under one contract: set the threshold again under "
                "this reranker's contract (ScoreThreshold(value, reranker.contract)), or use the "
                "reranker it was set under."
            )
        elif "folder" in what:
            advice = (
                "The folder holds another network than the contract pins: pass the folder the "
                "contract was read from, or read the contract of this folder again "
                "(rerank_contract_for)."
            )
        else:
            advice = (
                "Use the reranker contract they were made under, or make them again under this one."
            )
        super().__init__(
            f"reranker contract mismatch: {what} made under another reranker contract "
            "cannot be used with this reranker; nothing was returned.\n"
            + "\n".join(lines)
            + "\n"
            + advice
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_reranker_mismatch, (type(self), self.expected, self.caller, self.what))


def _rebuild_reranker_mismatch(
    cls: type[RerankerMismatchError], expected: Any, caller: Any, what: str
) -> RerankerMismatchError:
    return cls(expected, caller, what=what)


class AliasError(CtxembError):
    """An alias cannot be opened or changed as asked; nothing was changed."""


class UnknownAliasError(AliasError, InvalidInputError):
    """No alias of that name in the store."""


class AliasConflictError(AliasError, InvalidInputError):
    """The name is taken: an alias named like an existing index, or an alias that exists."""


class AliasStateError(AliasError, InvalidInputError):
    """The alias is not in a state that allows this step (``--retire`` while still upgrading,
    a cutover with no upgrade begun, an upgrade to the contract it already serves)."""


class TextNotStoredError(AliasError, InvalidInputError):
    """A backfill would re-embed records whose vectors were made from other texts than the ones
    they store (the text digest each carries is not its stored text's: a framework joined
    metadata in, as Haystack's ``meta_fields_to_embed`` does). A backfill embeds stored texts,
    so these would come out of the upgrade embedded from less than before, and never match the
    target's records; nothing was written.

    Attributes:
        index: the index the records are in.
        ids: the records' ids.
    """

    def __init__(self, index: str, ids: Sequence[str]) -> None:
        self.index, self.ids = index, tuple(ids)
        shown = ", ".join(repr(i) for i in self.ids[:5]) + (" …" if len(self.ids) > 5 else "")
        super().__init__(
            f"{len(self.ids)} records of {index!r} were embedded from other texts than they "
            f"store ({shown}): a backfill re-embeds stored texts, so the upgrade would embed "
            "them from another text than before. Nothing was written. Write them into the "
            "shadow through the pipeline that embedded them, or store the text you embed."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.index, self.ids))


class AliasMovedError(AliasError):
    """Another client changed the alias between this one's read and its write (two upgrades of
    one alias at once): this change was not written; read the alias again."""


class DamagedAliasError(AliasError, DataFormatError):
    """The alias's stored record cannot be read or contradicts itself."""


class NoEncoderError(AliasError):
    """No encoder at hand makes the contract an alias now points at: nothing was embedded or
    returned (a reader never embeds under one contract to search an index of another).

    Attributes:
        contract: the contract no encoder was given for.
        alias: the alias, if it was reached through one.
    """

    def __init__(self, contract: Any, alias: str | None = None, *, where: str = "") -> None:
        self.contract = contract
        self.alias = alias
        through = f"alias {alias!r} now serves" if alias else "the index is written under"
        problem = f"no encoder for the contract {through}: {contract.describe()}" + (
            f" ({where})" if where else ""
        )
        super().__init__(
            f"{problem}. Give an embedder of this contract, its model folder or the URL of a "
            "server that serves it (encoders=...).",
            cli=f"{problem}. Install its model on this machine, or give the URL of a server that "
            "serves it (--url).",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_no_encoder, (self.contract, self.alias))


def _rebuild_no_encoder(contract: Any, alias: str | None) -> NoEncoderError:
    return NoEncoderError(contract, alias)


class GateFailedError(AliasError):
    """An upgrade's gate did not pass: the alias was not switched.

    Attributes:
        gates: every gate checked, each with the figure it measured.
    """

    def __init__(self, message: str, gates: Sequence[Any] = ()) -> None:
        self.gates = tuple(gates)
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.gates))


class CtxembWarning(UserWarning):
    """Root of the warnings ctxemb emits."""


class TruncationWarning(CtxembWarning):
    """Some texts were longer than the contract's ``max_tokens`` and were truncated.

    Attributes:
        count: how many texts were truncated.
        total: how many texts the call embedded.
        max_tokens: the limit they were cut to.
    """

    def __init__(self, count: int, total: int, max_tokens: int) -> None:
        self.count = count
        self.total = total
        self.max_tokens = max_tokens
        super().__init__(
            f"{count} of {total} texts were longer than max_tokens={max_tokens} and were "
            "truncated as the contract says; chunk them if their ends matter"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.count, self.total, self.max_tokens))


def _mismatch_problem(changes: tuple[FieldChange, ...], kind: str) -> str:
    """What a mismatch with an index is: the fields, and what the kind of change means."""
    lines = [f"  {c.field}: index={c.index!r}, caller={c.caller!r}" for c in changes]
    if kind == "label":
        lead = (
            "Only the model's name differs; the weights digests are equal, so the vectors are "
            "the same. "
        )
    elif kind == "query_only":
        lead = "Only the query side differs: the stored documents stay valid. "
    else:
        lead = "The stored vectors were made under another recipe. "
    return (
        "contract mismatch: the index was written under another embedding contract; "
        "nothing was written or returned.\n" + "\n".join(lines) + "\n" + lead
    )


def _mismatch_remedies(diff: ContractDiff, stamped: bool, index_model: str) -> tuple[Remedy, ...]:
    """The ways out of a mismatch with an index, best first (the index's values, for using its
    contract; the caller's, for re-stamping or migrating to it)."""
    fields = tuple(c.field for c in diff.changes)
    theirs = {c.field: c.index for c in diff.changes}
    ours = {c.field: c.caller for c in diff.changes}
    kind = diff.kind.value
    if kind == "label":
        return (
            Remedy.of(Step.NAME_MODEL, fields=fields, model=index_model),
            Remedy.of(
                Step.USE_INDEX_CONTRACT, fields=fields, label=True, stamped=stamped, **theirs
            ),
        )
    query = kind == "query_only"
    use = Remedy.of(Step.USE_INDEX_CONTRACT, fields=fields, stamped=stamped, query=query, **theirs)
    if query:
        return (use, Remedy.of(Step.RESTAMP, fields=fields, **ours)) if stamped else (use,)
    again = Remedy.of(Step.MIGRATE if stamped else Step.REEMBED, fields=fields, **ours)
    return (use, again)


def _folder_problem(changes: tuple[FieldChange, ...], folder: str) -> str:
    """The contract's folder holds another network; no index is involved."""
    lines = "\n".join(f"  {c.field}: contract={c.index!r}, folder={c.caller!r}" for c in changes)
    return (
        f"the model folder {folder} holds other weights than the contract pins (changed or "
        "replaced since the contract was read); nothing was embedded.\n" + lines + "\n"
    )


def _folder_remedies(folder: str) -> tuple[Remedy, ...]:
    return (Remedy.of(Step.USE_FOLDER), Remedy.of(Step.READ_FOLDER, folder=folder))


def _replica(instance: str | None) -> str:
    """Which ``ctxemb serve`` process answered, for a message about the server at a URL: the
    id it prints when it starts (behind a load balancer, the one replica to find)."""
    return "" if instance is None else f" (its instance {instance}, one replica if several)"


def _server_problem(
    changes: tuple[FieldChange, ...],
    server: str,
    served_models: tuple[str, ...],
    served_model: str | None,
    instance: str | None = None,
) -> str:
    """The embedding server at ``server`` serves another contract (a server of several: none
    of its ``served_models``; the fields are those of ``served_model``'s). ``instance``: the
    process that answered, which ``ctxemb serve`` prints when it starts: behind a load
    balancer, the one replica of several to find."""
    lines = "\n".join(f"  {c.field}: server={c.index!r}, caller={c.caller!r}" for c in changes)
    several = ""
    if served_models:
        listed = ", ".join(repr(m) for m in served_models)
        several = (
            f"  (it serves {len(served_models)} contracts, models {listed}; the fields above "
            f"are those of {served_model!r}, the nearest)\n"
        )
    return (
        f"contract mismatch: the embedding server at {server}{_replica(instance)} serves "
        "another contract than the one asked for; nothing was embedded.\n" + lines + "\n" + several
    )


def _server_remedies(
    diff: ContractDiff, caller: EmbeddingContract, server: str, served_models: tuple[str, ...]
) -> tuple[Remedy, ...]:
    fields = tuple(c.field for c in diff.changes)
    ours = {c.field: c.caller for c in diff.changes}
    # A server of several contracts has no one contract of its own: the remedy names its ids.
    theirs: dict[str, Any] = {"models": served_models} if served_models else {}
    return (
        Remedy.of(Step.SERVE, fields=fields, server=server, **{"model": caller.model, **ours}),
        Remedy.of(Step.USE_SERVER_CONTRACT, fields=fields, server=server, **theirs),
    )


def _fingerprint_message(
    index: str, caller: str, *, index_known: bool = False, caller_known: bool = True
) -> str:
    if caller_known:
        why = (
            "Only the index's fingerprint is known, so the differing fields cannot be named (give "
            "the index's contract, e.g. from its stamp or JSON, to name them). Use the contract "
            "whose fingerprint the index carries, or re-embed the documents under this one."
        )
    else:
        side = "the caller's contract was" if index_known else "neither contract was"
        why = (
            f"Only fingerprints are known ({side} not built in this process), so the differing "
            "fields cannot be named. Embed the queries under the index's contract, or re-embed "
            "the documents under the caller's."
        )
    return (
        "contract mismatch: the index (or document) was written under another embedding "
        "contract; nothing was written or returned.\n"
        f"  fingerprint: index={index[:12]!r}, caller={caller[:12]!r}\n" + why
    )


def _documents_line(documents: tuple[str | int, ...]) -> str:
    if not documents:
        return ""
    shown = ", ".join(repr(d) for d in documents[:5]) + (" …" if len(documents) > 5 else "")
    which = "ids" if isinstance(documents[0], str) else "positions"
    return f"\n{len(documents)} stored document(s) carry the index's contract ({which} {shown})."
