"""What to do about an error, as data; and its wording for a Python caller.

An error that has a next step carries it as :class:`Remedy` values (``err.remedies``, the best
first): a neutral :class:`Step` (re-stamp the index, re-embed it into a new one,
use the index's own contract, …) and the parameters that step needs (the differing contract
fields, the values to take, the index's name). Nothing in a remedy names a function, a module
or a command-line option: whoever shows the error words it for the interface the user called.

* A Python caller reads ``str(err)``: :func:`python_advice` names the calls of the store
  adapter the error came through, in that adapter's :class:`StoreTerms` (``ctxemb_pgvector
  .restamp(...)``; the default store's, Chroma's, when no adapter gave its own).
* A user of the ``ctxemb`` command reads the advice that :mod:`ctxemb_core.cli.advice` words
  from the same remedies, naming the options of the command actually run. Without a command
  (``err.message_for("cli")``), :func:`cli_advice` words it for the command line in general.

Example:
    >>> r = Remedy.of(Step.RESTAMP, fields=("query_prefix",), query_prefix="query: ")
    >>> r.step, r.get("query_prefix")
    (<Step.RESTAMP: 'restamp'>, 'query: ')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

__all__ = [
    "BUILD_LEXICAL_SIDE",
    "DEFAULT_TERMS",
    "REBUILD_LEXICAL_SIDE",
    "Remedy",
    "Said",
    "Step",
    "StoreTerms",
    "cli_advice",
    "python_advice",
    "repair_calls",
    "served_models",
]


class Step(str, Enum):
    """What the user can do next, in no interface's words."""

    #: Embed under the contract the index was written under (values: that contract's values of
    #: the differing fields; ``stamped``: the index holds its contract; ``query``: only the
    #: query side differs; ``label``: only the model's name differs; ``hybrid``: ``lexical``
    #: or ``fusion``, the side of a hybrid contract whose stamped recipe to use).
    USE_INDEX_CONTRACT = "use_index_contract"
    #: Record the model under the name the index records (values: ``model``).
    NAME_MODEL = "name_model"
    #: Accept the caller's query side on the index, deliberately (values: the caller's values).
    RESTAMP = "restamp"
    #: Re-embed the index into a new one under the caller's contract (values: the caller's).
    MIGRATE = "migrate"
    #: Re-embed the documents (a store that keeps a fingerprint per document: no migration call).
    REEMBED = "reembed"
    #: Stamp an unstamped index once a sample of its records re-embeds to their vectors.
    ADOPT = "adopt"
    #: Find which contract wrote an index.
    DETECT = "detect"
    #: Re-embed the records a raw client wrote, from their stored text.
    REPAIR = "repair"
    #: Check every record, to list all such records.
    VERIFY_ALL = "verify_all"
    #: Serve the contract asked for at the server (values: the caller's model and values).
    SERVE = "serve"
    #: Embed under the server's own contract (values: ``server``; ``models``: the ids of a
    #: server of several contracts, which has none of its own).
    USE_SERVER_CONTRACT = "use_server_contract"
    #: Use the model folder the contract was read from.
    USE_FOLDER = "use_folder"
    #: Read the contract of the folder as it is now (values: ``folder``).
    READ_FOLDER = "read_folder"
    #: Write the stamp's contract back into the store's own embedding setting (its canary first).
    REPAIR_SETTING = "repair_setting"
    #: Build a hybrid index's lexical side again under the caller's recipe (values: its fields).
    REBUILD_LEXICAL = "rebuild_lexical"
    #: Stamp the caller's fusion as a hybrid index's own (values: its fields).
    SET_FUSION = "set_fusion"
    #: Bring a hybrid index's lexical side back in step with its dense side.
    REFRESH = "refresh"
    #: Give these parameters (values: parameter -> value; ``when``: the case it is for).
    GIVE = "give"


@dataclass(frozen=True)
class Remedy:
    """One next step: a :class:`Step` and its parameters.

    Attributes:
        step: what to do.
        fields: the contract fields involved (those that differ), in contract order.
        values: the step's parameters, ``(name, value)`` pairs (see each :class:`Step`).
        when: the case the step is for, in words (``"you meant 'all-MiniLM-L6-v2'"``), or ``""``.
    """

    step: Step
    fields: tuple[str, ...] = ()
    values: tuple[tuple[str, Any], ...] = ()
    when: str = ""

    @classmethod
    def of(cls, step: Step, *, fields: Sequence[str] = (), when: str = "", **values: Any) -> Remedy:
        """A remedy with its parameters as keywords."""
        return cls(Step(step), tuple(fields), tuple(values.items()), when)

    def get(self, name: str, default: Any = None) -> Any:
        """The parameter ``name``, or ``default``."""
        return dict(self.values).get(name, default)

    def to_dict(self) -> dict[str, Any]:
        """The remedy as JSON-ready data (values as given; enums by their value)."""
        return {
            "step": self.step.value,
            "fields": list(self.fields),
            "values": {k: getattr(v, "value", v) for k, v in self.values},
            **({"when": self.when} if self.when else {}),
        }


@dataclass(frozen=True)
class StoreTerms:
    """A store adapter's words, for advice that names its calls (given by the adapter).

    Attributes:
        module: the adapter's import name (``ctxemb_pgvector``).
        open: its function that opens an index (``open_table``).
        kind: what it calls an index (``table``).
        records: what it calls the index's records (``rows``).
        cli_where: the command-line options that reach the same store, for advice that cannot
            spell them out (``--store pgvector and the same --dsn``).
        frameworks: how the framework adapter the error came through adopts an index of this
            store (:meth:`adopting_in`), or ``""``: a store adapter's own words name none.
        scope: the keywords every call needs to reach the same index, as typed after the
            others (``", schema='s2'"``; ``""``: none): :meth:`within`.
        raw_contract: the stamp's contract JSON as read raw from the store (Chroma's
            ``metadata['ctxemb:contract']``).
    """

    module: str
    open: str
    kind: str
    records: str
    cli_where: str
    frameworks: str = ""
    scope: str = ""
    raw_contract: str = "metadata['ctxemb:contract']"

    @classmethod
    def of(
        cls,
        store: str,
        options: str,
        *,
        open: str = "open_collection",
        kind: str = "collection",
        records: str = "records",
        frameworks: str = "",
    ) -> StoreTerms:
        """The terms of the adapter ``ctxemb_<store>``, whose store the command line reaches
        with ``--store <store>`` and ``options`` (``"--dsn"``): every adapter's words built
        the same way.

        Example:
            >>> StoreTerms.of("pgvector", "--dsn", open="open_table", kind="table").cli_where
            '--store pgvector and the same --dsn'
        """
        where = f"--store {store} and the same {options}"
        return cls(f"ctxemb_{store}", open, kind, records, where, frameworks)

    def adopting_in(self, frameworks: str) -> StoreTerms:
        """These words, with a framework adapter's way to adopt an index (``"in LangChain
        ContractChroma(..., adopt=True)"``): its own, never another framework's.

        Example:
            >>> DEFAULT_TERMS.adopting_in("in LlamaIndex ContractChromaVectorStore(...)").module
            'ctxemb_chroma'
        """
        return replace(self, frameworks=frameworks)

    def within(self, **scope: Any) -> StoreTerms:
        """These words for an index that the calls reach only with ``scope`` (a PostgreSQL
        table outside ``public``: ``within(schema="s2")``): every call they advise passes it.

        Example:
            >>> StoreTerms.of("pgvector", "--dsn").within(schema="s2").scope
            ", schema='s2'"
        """
        return replace(self, scope="".join(f", {k}={v!r}" for k, v in scope.items()))


#: The default store's terms (Chroma's, the store the ``ctxemb`` command uses by default): an
#: error that came through no adapter (built directly, or raised by core) is worded in them.
DEFAULT_TERMS = StoreTerms(
    module="ctxemb_chroma",
    open="open_collection",
    kind="collection",
    records="records",
    cli_where="the same --path, or --host and --port",
)


@dataclass(frozen=True)
class Said:
    """One step said to a Python caller and to a ``ctxemb`` user, for a refusal whose advice
    is that step alone (no values to word): each audience reads only its own words.

    Example:
        >>> e = REBUILD_LEXICAL_SIDE.into(ValueError, "damaged; rebuild it ({do})")
        >>> str(e)
        'damaged; rebuild it (open_hybrid(..., rebuild=True))'
    """

    python: str
    cli: str

    def into(self, error: Any, text: str, **kwargs: Any) -> Any:
        """``error(text)``, ``{do}`` in ``text`` said for Python, and for the command line as
        its ``cli=`` message (where ``error`` takes one: every ctxemb error does)."""
        python, cli = text.replace("{do}", self.python), text.replace("{do}", self.cli)
        try:
            return error(python, cli=cli, **kwargs)
        except TypeError:  # not a ctxemb error: the Python words alone
            return error(python, **kwargs)


#: Build a hybrid index's lexical side from its dense side.
BUILD_LEXICAL_SIDE = Said("open_hybrid(..., create=True)", "ctxemb index --hybrid")
#: Rebuild a hybrid index's lexical side from its dense side, deliberately.
REBUILD_LEXICAL_SIDE = Said(
    "open_hybrid(..., rebuild=True)", "ctxemb index --hybrid --rebuild-lexical"
)


#: :attr:`Step.REPAIR_SETTING` for the command line, which has no command for it.
REPAIR_SETTING_CLI = (
    "No ctxemb command rewrites a store's setting: open the collection once through its "
    "adapter with repair, which writes the stamp's contract back into the configuration (the "
    "stamp and its canary are checked first)."
)


def _sentences(clauses: list[str]) -> str:
    """Alternatives joined by ", or ", the first capitalised, ended by a full stop."""
    clauses = [c for c in clauses if c]
    if not clauses:
        return ""
    text = ", or ".join(clauses)
    return text[0].upper() + text[1:] + "."


def served_models(by: dict[Step, Remedy]) -> tuple[str, ...]:
    """The model ids of a server of several contracts that a mismatch names (its
    :attr:`Step.USE_SERVER_CONTRACT` remedy's ``models``), ``()`` for a server of one."""
    use = by.get(Step.USE_SERVER_CONTRACT)
    return tuple(use.get("models", ())) if use is not None else ()


def repair_calls(terms: StoreTerms) -> str:
    """The Python calls that re-embed records written around ctxemb (run as printed)."""
    m = terms.module
    return (
        f"    docs = {m}.{terms.open}(client, name, contract, sample=0{terms.scope})\n"
        f"    bad = {m}.verify(docs, contract, all=True).bad_ids\n"
        '    got = docs.get(ids=list(bad), include=["documents", "metadatas"])\n'
        '    docs.upsert(got["ids"], got["documents"], got["metadatas"])'
    )


#: Parameters of :attr:`Step.GIVE` that say how, not what: never passed as an argument.
GIVE_CONTROLS = frozenset({"register"})


def _python_give(r: Remedy) -> str:
    given = [(k, v) for k, v in r.values if k not in GIVE_CONTROLS]
    model = dict(given).get("model")
    keywords = ", ".join(f"{k}={v!r}" for k, v in given if k != "model")
    call = f"contract_for({', '.join(x for x in (repr(model) if model else '', keywords) if x)})"
    if r.get("register") and dict(given).get("name"):
        call += (
            f", or register_model({dict(given)['name']!r}, {model!r}) so that contracts naming "
            "it find it"
        )
    return f"If {r.when}: {call}." if r.when else f"Pass {call}."


def _cli_give(r: Remedy) -> str:
    shown = " ".join(
        f"--{k.replace('_', '-')} {v if k == 'model' else repr(v)}"
        for k, v in r.values
        if k not in GIVE_CONTROLS
    )
    return f"If {r.when}: {shown}." if r.when else f"Pass {shown}."


def python_advice(remedies: Sequence[Remedy], terms: StoreTerms | None = None) -> str:
    """The remedies in a Python caller's words: the calls of the adapter ``terms`` describe."""
    t = terms or DEFAULT_TERMS
    m = t.module
    by = {r.step: r for r in remedies}
    if Step.REPAIR in by:
        r = by[Step.REPAIR]
        return (
            "To re-embed them from their stored text, open it without the record sample (its "
            "stamp and canary are still checked), find every such record (the sample saw some) "
            "and upsert them through ctxemb:\n"
            f"{repair_calls(t)}\n"
            "A record without text cannot be re-embedded: delete it (docs.delete(ids=[...])). "
            f"Or rebuild the index under this contract: {m}.migrate(docs, contract, "
            f"'<new name>'{t.scope})."
        )
    if Step.REFRESH in by:
        return (
            "Call refresh() on the hybrid index (or open it with refresh=True): the lexical side "
            "is rebuilt from the dense side's stored texts."
        )
    if Step.REBUILD_LEXICAL in by:
        return (
            "Query with the stamp's recipe (give no lexical= and it is read from the stamp), or "
            f"rebuild the lexical side under yours: {m}.open_hybrid(..., lexical=yours, "
            "rebuild=True) (the dense vectors stay)."
        )
    if Step.SET_FUSION in by:
        return (
            "Query with the stamp's fusion (give no fusion=), or stamp this fusion as the "
            "index's own: HybridIndex.set_fusion(fusion)."
        )
    if Step.REPAIR_SETTING in by:
        return (
            "Reopen with repair=True to write the stamp's contract back into the configuration "
            "(the stamp and its canary are checked first)."
        )
    if Step.ADOPT in by:
        shown = repr(by[Step.ADOPT].get("name") or "name")
        shown = "name" if shown == "'name'" else shown
        frameworks = f", or {t.frameworks}" if t.frameworks else ""
        text = (
            f"If its vectors were made under your contract, adopt it once (a sample of its "
            f"{t.records} is re-embedded, and it is stamped only if they match): "
            f"{m}.{t.open}(client, {shown}, contract, adopt=True{t.scope}){frameworks}."
        )
        if Step.DETECT in by:
            text += (
                f" If you do not know its contract, {m}.detect(client, {shown}, "
                f"model{t.scope}) finds it."
            )
        return text
    if Step.USE_FOLDER in by:
        folder = by[Step.READ_FOLDER].get("folder") if Step.READ_FOLDER in by else "<folder>"
        return (
            "Pass the folder the contract was read from: Embedder(contract, path='<that "
            f"folder>'). To use this folder's model instead, read its contract: "
            f"contract_for({folder!r}) (an index written under the old contract refuses it; "
            f"re-embed it with {m}.migrate)."
        )
    if Step.SERVE in by:
        server = by[Step.SERVE].get("server")
        models = served_models(by)
        if models:
            # A server of several has no contract of its own: contract_for(url) cannot pick one.
            return (
                "Serve the contract asked for there too (ctxemb serve ... --also "
                "ID=CONTRACT.json), or embed under one the server serves, models "
                f"{', '.join(repr(m) for m in models)}: from ctxemb_core.remote import "
                f"server_contract; server_contract({server!r}, model={models[0]!r}).contract "
                "reads one (an index written under another contract refuses it)."
            )
        return (
            "Serve the contract asked for there (ctxemb serve with the same model and contract "
            f"options), or embed under the server's own: contract_for({server!r}) reads it (an "
            "index written under the other contract refuses it)."
        )
    if Step.GIVE in by:
        return " ".join(_python_give(r) for r in remedies if r.step is Step.GIVE)
    clauses = []
    for r in remedies:
        if r.step is Step.USE_INDEX_CONTRACT:
            verb = "query with" if r.get("query") else "use"
            if r.get("label"):
                clauses.append("use the index's contract")
            elif r.get("stamped"):
                clauses.append(
                    f"{verb} the index's contract ({m}.stamped_contract(client, name{t.scope}) "
                    f"reads it; EmbeddingContract.from_json({t.raw_contract}) from the raw "
                    "stamp)"
                )
            elif r.get("query"):
                clauses.append(
                    "query with the contract the documents were written under (the index's)"
                )
            else:
                clauses.append("use the contract the index was written under")
        elif r.step is Step.NAME_MODEL:
            clauses.append(
                f"name the model as the index does (contract_for(folder, name={r.get('model')!r}))"
            )
        elif r.step is Step.RESTAMP:
            clauses.append(
                f"accept the new query side deliberately with {m}.restamp(client, name, contract"
                f"{t.scope})"
            )
        elif r.step is Step.MIGRATE:
            clauses.append(
                f"re-embed the {t.kind} into a new one under this contract with "
                f"{m}.migrate(source, contract, new_name{t.scope}) (source: the {t.kind} opened "
                f"under its "
                "own contract)"
            )
        elif r.step is Step.REEMBED:
            clauses.append("migrate the index by re-embedding")
    return _sentences(clauses)


def cli_advice(remedies: Sequence[Remedy], terms: StoreTerms | None = None) -> str:
    """The remedies for the ``ctxemb`` command in general (no command known): the commands to
    run, the store given as :attr:`StoreTerms.cli_where` says. A command words them itself
    (:mod:`ctxemb_core.cli.advice`), with its own options and the store it was given."""
    t = terms or DEFAULT_TERMS
    where = f"(with {t.cli_where})"
    by = {r.step: r for r in remedies}
    if Step.REPAIR in by or Step.VERIFY_ALL in by:
        return (
            "Rebuild it from the stored texts into a new collection: ctxemb migrate --collection "
            f"<name> --to <new name> --sample 0 {where}; ctxemb verify --collection <name> --all "
            "lists every such record."
        )
    if Step.REPAIR_SETTING in by:
        return REPAIR_SETTING_CLI
    if Step.REFRESH in by:
        return (
            "Run the same ctxemb index --hybrid again: the lexical side is rebuilt from the "
            "dense side's stored texts."
        )
    if Step.REBUILD_LEXICAL in by:
        return (
            "Query with the stamp's recipe (give no lexical options and it is read from the "
            "stamp), or rebuild the lexical side under yours: ctxemb index --hybrid "
            "--rebuild-lexical with your options (the dense vectors stay)."
        )
    if Step.SET_FUSION in by:
        return (
            "Query with the stamp's fusion (give no fusion options), or stamp this fusion as "
            "the index's own: ctxemb index --hybrid --set-fusion with the options."
        )
    if Step.ADOPT in by:
        name = by[Step.ADOPT].get("name") or "<name>"
        return (
            f"Find its contract and stamp it: ctxemb detect --collection {name} --model <model> "
            f"--adopt {where}; the {t.kind} is stamped only if a sample of its {t.records} "
            "re-embeds to their stored vectors."
        )
    if Step.USE_FOLDER in by:
        folder = by[Step.READ_FOLDER].get("folder") if Step.READ_FOLDER in by else "<folder>"
        return (
            "Pass the folder the contract was read from as --model. To use this folder's model "
            f"instead, index again under its contract: --model {folder} (a collection written "
            "under the old one refuses it; ctxemb migrate re-embeds it)."
        )
    if Step.SERVE in by:
        models = served_models(by)
        if models:
            return (
                "Serve the contract asked for there too (ctxemb serve ... --also "
                "ID=CONTRACT.json), or drop --model and the contract flags and give "
                f"--served-model ID to use that model's contract (it serves "
                f"{', '.join(repr(m) for m in models)})."
            )
        return (
            "Serve the contract asked for there (ctxemb serve with the same model and contract "
            "options), or drop --model and the contract flags to use the server's own contract."
        )
    if Step.GIVE in by:
        return " ".join(_cli_give(r) for r in remedies if r.step is Step.GIVE)
    clauses = []
    for r in remedies:
        if r.step is Step.USE_INDEX_CONTRACT:
            verb = "query with" if r.get("query") else "use"
            if r.get("label"):
                clauses.append("drop --model to use the index's own contract")
            elif r.get("stamped"):
                clauses.append(
                    f"drop --model and the contract flags to {verb} the collection's own contract"
                )
            elif r.get("query"):
                clauses.append(
                    "query with the contract the documents were written under (the index's)"
                )
            else:
                clauses.append("use the contract the index was written under")
        elif r.step is Step.NAME_MODEL:
            clauses.append(f"pass --name {r.get('model')!r} with --model")
        elif r.step is Step.RESTAMP:
            clauses.append(
                "accept the new query side deliberately: ctxemb restamp --collection <name> "
                f"{where} and the contract options that change (e.g. --query-prefix), or "
                "--contract FILE"
            )
        elif r.step is Step.MIGRATE:
            clauses.append(
                "re-embed it into a new collection: ctxemb migrate --collection <name> --to "
                "<new name> with the new --model and contract flags"
            )
        elif r.step is Step.REEMBED:
            clauses.append("migrate the index by re-embedding")
    return _sentences(clauses)
