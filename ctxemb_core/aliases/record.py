"""What an alias is: a stable name bound to one index and that index's contract.

An :class:`AliasRecord` is kept in the store itself (each store's
:class:`~ctxemb_core.aliases.book.AliasBook`) and only ever replaced whole, by a
compare-and-swap on its :attr:`~AliasRecord.generation`: two writers that read one generation
cannot both write the next. Readers compare the generation on every call, the way a guarded
index compares its stamp version, and switch index and query encoder together when it moved.

The states of one alias::

    serving (target)  --begin-->  upgrading (target, shadow)  --cutover-->  serving (shadow,
    previous=target)  --rollback-->  serving (target, previous=shadow)  --retire-->  serving

While an alias has a ``shadow`` or a ``previous``, every write made through it goes to each of
its :meth:`~AliasRecord.written` indexes, each under its own contract.

Example:
    >>> record = AliasRecord.create("docs", AliasTarget.of("docs-v1", contract))  # doctest: +SKIP
    >>> record.generation, record.state                                        # doctest: +SKIP
    (1, <AliasState.SERVING: 'serving'>)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.errors import CtxembError, DamagedAliasError, InvalidInputError
from ctxemb_core.hybrid.contract import HybridContract

__all__ = ["ALIAS_SCHEMA", "AliasRecord", "AliasState", "AliasTarget", "check_alias_name"]

#: The version of the record's JSON form this ctxemb writes at most and reads. A record whose
#: targets are all dense is written as schema 1, as before; one with a hybrid target as schema 2,
#: so that a ctxemb that knows no lexical side refuses it rather than write one side only.
ALIAS_SCHEMA = 2
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}")


def check_alias_name(name: Any) -> str:
    """An alias's name: 1-48 characters of ``A-Za-z0-9_-``, starting with a letter or digit
    (a name every store can keep as an index name too)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInputError(
            f"an alias name is 1-48 characters of A-Za-z0-9_- starting with a letter or digit, "
            f"got {name!r}"
        )
    return name


class AliasState(str, Enum):
    """Whether an alias serves one index, or is upgrading into a shadow index."""

    SERVING = "serving"
    UPGRADING = "upgrading"


@dataclass(frozen=True)
class AliasTarget:
    """One physical index and the contract its stamp carries; for a hybrid index also the
    hybrid contract its lexical side is opened under (the lexical recipe and the fusion, whose
    ``dense`` is ``contract``): an alias over a hybrid index reads and writes both sides."""

    index: str
    contract: EmbeddingContract
    hybrid: HybridContract | None = None

    def __post_init__(self) -> None:
        if self.hybrid is not None and not same_contract(
            self.hybrid.dense, self.contract.fingerprint, exact=True
        ):
            raise InvalidInputError(
                f"target {self.index!r}: its hybrid contract's dense side is not its contract"
            )

    @classmethod
    def of(
        cls, index: str, contract: EmbeddingContract, hybrid: HybridContract | None = None
    ) -> AliasTarget:
        """``hybrid``'s recipe (no fitted vocabulary), its dense side taken as ``contract``."""
        return cls(
            index, contract, None if hybrid is None else hybrid.recipe().with_(dense=contract)
        )

    @property
    def fingerprint(self) -> str:
        return self.contract.fingerprint

    @property
    def recipe(self) -> EmbeddingContract | HybridContract:
        """What this target is built under, whole: the hybrid contract, else the dense one."""
        return self.contract if self.hybrid is None else self.hybrid

    def to_dict(self) -> dict[str, Any]:
        data = {
            "index": self.index,
            "fingerprint": self.fingerprint,
            "contract": self.contract.to_dict(),
        }
        if self.hybrid is not None:  # absent for a dense index: its record reads as before
            data["hybrid"] = self.hybrid.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Any) -> AliasTarget:
        if not isinstance(data, dict) or not isinstance(data.get("index"), str):
            raise ValueError(f"a target is {{index, fingerprint, contract}}, got {data!r}")
        contract = EmbeddingContract.from_dict(data["contract"])
        if not same_contract(contract, str(data.get("fingerprint")), exact=True):
            raise ValueError(f"target {data['index']!r}: its fingerprint is not its contract's")
        hybrid = None
        if data.get("hybrid") is not None:
            try:
                hybrid = HybridContract.from_dict(data["hybrid"])
            except CtxembError as exc:
                raise ValueError(f"target {data['index']!r}: its hybrid contract: {exc}") from None
        try:
            return cls(data["index"], contract, hybrid)
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None

    def __str__(self) -> str:
        hybrid = "" if self.hybrid is None else f" + lexical [{self.hybrid.fingerprint[:12]}]"
        return f"{self.index} [{self.fingerprint[:12]}]{hybrid}"

    def describe(self) -> str:
        """The contract (the hybrid one, for a hybrid index) in a few words."""
        return (self.hybrid or self.contract).describe()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class AliasRecord:
    """An alias as its store keeps it.

    Attributes:
        name: the alias, the name applications open.
        target: the index reads are served from, and its contract.
        generation: raised by every change; a change is written only over the generation it
            was decided on (compare-and-swap).
        state: serving, or upgrading into ``shadow``.
        shadow: the index being built under the new contract while upgrading.
        previous: the index served before the last cutover or rollback, kept (and written)
            until it is retired.
        changed: when this generation was written (UTC, ISO 8601).
        step: what made this generation (``create``, ``begin``, ``cutover``, ...).
    """

    name: str
    target: AliasTarget
    generation: int = 1
    state: AliasState = AliasState.SERVING
    shadow: AliasTarget | None = None
    previous: AliasTarget | None = None
    changed: str = field(default_factory=_now)
    step: str = "create"

    @classmethod
    def create(cls, name: str, target: AliasTarget) -> AliasRecord:
        return cls(check_alias_name(name), target)

    def written(self) -> tuple[AliasTarget, ...]:
        """Every index a write through the alias goes to: the target first, then the shadow
        (while upgrading) and the previous target (until it is retired)."""
        seen: dict[str, AliasTarget] = {}
        for target in (self.target, self.shadow, self.previous):
            if target is not None and target.index not in seen:
                seen[target.index] = target
        return tuple(seen.values())

    def next(self, step: str, **changes: Any) -> AliasRecord:
        """The next generation, with ``changes``."""
        return replace(self, generation=self.generation + 1, changed=_now(), step=step, **changes)

    # -- the stored form ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 2 if any(t.hybrid is not None for t in self.written()) else 1,
            "name": self.name,
            "generation": self.generation,
            "state": self.state.value,
            "target": self.target.to_dict(),
            "shadow": None if self.shadow is None else self.shadow.to_dict(),
            "previous": None if self.previous is None else self.previous.to_dict(),
            "changed": self.changed,
            "step": self.step,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, name: str) -> AliasRecord:
        """The record stored for alias ``name``.

        Raises:
            DamagedAliasError: it does not parse, is of a newer schema, names another alias or
                contradicts itself (a fingerprint that is not its contract's).
        """
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            schema = data.get("schema")
            if type(schema) is not int or not 1 <= schema <= ALIAS_SCHEMA:
                raise ValueError(f"schema {schema!r} (this ctxemb reads 1 to {ALIAS_SCHEMA})")
            if data.get("name") != name:
                raise ValueError(f"it names alias {data.get('name')!r}")
            generation = data["generation"]
            if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
                raise ValueError(f"generation {generation!r}")
            record = cls(
                name=name,
                target=AliasTarget.from_dict(data["target"]),
                generation=generation,
                state=AliasState(data["state"]),
                shadow=None
                if data.get("shadow") is None
                else AliasTarget.from_dict(data["shadow"]),
                previous=None
                if data.get("previous") is None
                else AliasTarget.from_dict(data["previous"]),
                changed=str(data.get("changed", "")),
                step=str(data.get("step", "")),
            )
        except DamagedAliasError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise DamagedAliasError(
                f"alias {name!r}: its stored record cannot be read: {exc}"
            ) from None
        if (record.state is AliasState.UPGRADING) != (record.shadow is not None):
            raise DamagedAliasError(
                f"alias {name!r}: state {record.state.value} contradicts its shadow "
                f"({record.shadow})"
            )
        return record

    def describe(self) -> str:
        """The record in a few lines, for ``ctxemb alias show``."""
        lines = [
            f"alias {self.name}: {self.state.value}, generation {self.generation} "
            f"({self.step}, {self.changed})",
            f"  target:   {self.target}  {self.target.describe()}",
        ]
        if self.shadow is not None:
            lines.append(f"  shadow:   {self.shadow}  {self.shadow.describe()}")
        if self.previous is not None:
            lines.append(f"  previous: {self.previous}  {self.previous.describe()}")
        if len(self.written()) > 1:
            lines.append("  writes go to: " + ", ".join(t.index for t in self.written()))
        return "\n".join(lines)
