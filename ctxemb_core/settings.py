"""Run settings, declared once: what an Embedder or a reranker runs with besides its contract.

A run setting (the backend, the device, the batch size, the token budget) changes how vectors or
scores are computed, never which: none is in the fingerprint. Each owner declares its settings
once, as :class:`RunSettings` (sentence-transformers' ``config_keys``), and the declaration
drives the owner's ``config()``, ``config_for()`` and ``from_config()``: which keys they write
and read, in which order, the defaults, and the checks made before anything is loaded.

Example:
    >>> from ctxemb_core import Embedder
    >>> [s.name for s in Embedder.run_settings.settings]
    ['backend', 'device', 'batch_size', 'token_budget']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxemb_core.errors import DataFormatError, InvalidInputError

__all__ = ["RunSettings", "Setting", "check_device"]


def _unchecked(value: Any, name: str) -> Any:
    return value


def check_device(value: Any, name: str) -> str:
    """A device name (``"cpu"``, ``"cuda:0"``): a non-empty string, else an error naming it."""
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{name} must be a device name such as 'cpu', got {value!r}")
    return value


@dataclass(frozen=True)
class Setting:
    """One run setting: its key in a config, its default, and the check of a given value.

    Attributes:
        name: the key in the config, and the keyword argument of the owner's constructor.
        default: the constructor's default.
        check: ``check(value, name)`` raises :class:`~ctxemb_core.errors.InvalidInputError`
            for a value the owner cannot run with.
        attribute: the owner's attribute that holds the value, when it is not ``name``.
    """

    name: str
    default: Any
    check: Callable[[Any, str], Any] = _unchecked
    attribute: str | None = None


@dataclass(frozen=True)
class RunSettings:
    """An owner's run settings, in the order its config lists them.

    Attributes:
        owner: how errors name the owner (``"Embedder"``, ``"reranker"``).
        described: how errors name its config (``"an Embedder config"``).
        source: the call that writes the config (``"Embedder.config()"``).
        located: the config keys before the settings: the contract and where its folders are.
        settings: the run settings.
    """

    owner: str
    described: str
    source: str
    located: tuple[str, ...]
    settings: tuple[Setting, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The settings' names, in order."""
        return tuple(s.name for s in self.settings)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key a config has, in the order it is written."""
        return self.located + self.names

    def defaults(self) -> dict[str, Any]:
        """Each setting's default."""
        return {s.name: s.default for s in self.settings}

    def with_(self, *settings: Setting) -> RunSettings:
        """A copy with ``settings`` added at the end (an owner's subclass that runs with more)."""
        return dataclasses.replace(self, settings=self.settings + settings)

    def check(self, values: Mapping[str, Any]) -> None:
        """Check each value given, in the declaration's order (the first bad one is raised)."""
        for s in self.settings:
            if s.name in values:
                s.check(values[s.name], s.name)

    def of(self, owner: object) -> dict[str, Any]:
        """The settings an owner runs with, read from its attributes."""
        return {s.name: getattr(owner, s.attribute or s.name) for s in self.settings}

    def complete(self, given: Mapping[str, Any], call: str) -> dict[str, Any]:
        """Every setting, in order: the one given, else the default.

        Raises:
            TypeError: a name that is not a setting (as Python raises for ``call``'s unknown
                keyword argument).
        """
        for name in given:
            if name not in self.names:
                raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")
        return {s.name: given.get(s.name, s.default) for s in self.settings}

    def read(self, config: Any) -> dict[str, Any]:
        """The settings a config holds (those it leaves out are the constructor's defaults).

        Raises:
            DataFormatError: not a mapping, no contract, or keys the config does not write.
        """
        if not isinstance(config, Mapping) or not isinstance(config.get("contract"), Mapping):
            raise DataFormatError(
                f"{self.described} is a mapping with a 'contract' (see {self.source}), got "
                f"{type(config).__name__}"
            )
        unknown = sorted(set(config) - set(self.keys))
        if unknown:
            raise DataFormatError(
                f"unknown {self.owner} config keys {unknown}; the keys are {sorted(self.keys)}"
            )
        return {k: config[k] for k in self.names if k in config}
