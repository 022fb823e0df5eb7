"""Argument checks shared by the public entry points: one rule each, one wording each.

Public: part of the core surface adapters build on ("Adapters and the surface they use" in
docs/architecture.md). An adapter checks the texts and counts its framework hands it with these,
so every adapter refuses the same input in the same words.

What a *text* is, for every call that embeds or caches one: an instance of ``str`` that is valid
Unicode. Python strings may hold surrogate code points (U+D800-U+DFFF: a lone half of a UTF-16
pair, or bytes decoded with ``errors="surrogateescape"``); they are the only code points UTF-8
cannot encode, so no tokenizer can read them. They are refused here, with the argument, the
index and the character position, instead of surfacing as a ``TypeError`` from the tokenizer.
Every other code point (NUL, noncharacters such as U+FFFF, private use) is valid and embedded.

What a *batch* is: a sequence (``list``, ``tuple``, ...) of texts, read once, in order. Refused:

- one string, or ``bytes``: a single value where a batch belongs;
- a one-shot iterator or generator: refusing it leaves it unconsumed (materialising would use up
  the caller's generator even when an item further on is refused), and the results pair with
  the input by index, which needs the input to be indexable. Pass ``list(...)`` instead;
- a mapping, a set: no order, or an order of keys that is rarely what was meant;
- a numpy array: its fixed-width strings have already dropped trailing NULs; pass ``.tolist()``.

A subclass of ``str`` (``numpy.str_``, say) is accepted as the plain string it holds, so no
overridden method of the subclass takes part in prefixing, hashing or tokenizing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ctxemb_core.errors import InvalidInputError

__all__ = ["check_positive_int", "check_text", "check_texts", "texts_from_iterable"]

# The code points a str may hold and UTF-8 may not: the surrogates.
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_positive_int(
    value: Any,
    name: str,
    *,
    kinds: tuple[type[Any], ...] = (int,),
    error: type[Exception] = InvalidInputError,
) -> int:
    """``value`` if it is an ``int`` above zero (``True`` is not a count), else an error.

    ``kinds`` are the types taken as integers (add ``numpy.integer`` where counts come from
    arrays); ``error`` is the class raised (``InvalidContractError`` for a contract's field).
    """
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise error(f"{name} must be a positive integer, got {value!r}")
    return value


def check_text(value: Any, name: str) -> str:
    """One text as a plain ``str``, or :class:`InvalidInputError` naming ``name``.

    Args:
        value: the argument as given.
        name: how the caller calls it (``"text"``, ``"word"``, ``"texts[3]"``).
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    text = value if type(value) is str else str.__str__(value)
    _check_encodable(text, name)
    return text


def check_texts(
    value: Any,
    name: str = "texts",
    *,
    single: str = "wrap a single text in a list",
    allow_empty: bool = True,
) -> list[str]:
    """A batch of texts as a new list of plain strings, or :class:`InvalidInputError`.

    Args:
        value: the argument as given.
        name: the argument's name, used in every message (``"texts"``, ``"contexts"``).
        single: the advice given when one string arrives where a batch belongs.
        allow_empty: whether an empty batch is acceptable.

    Raises:
        InvalidInputError: ``value`` is not a batch (see the module docstring), an item is not a
            string or is not valid Unicode (the message gives its index), or the batch is empty
            and ``allow_empty`` is false.
    """
    if isinstance(value, str):
        raise InvalidInputError(f"{name} must be a list of strings, got one string; {single}")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidInputError(
            f"{name} must be a list of strings, got {type(value).__name__}; decode the bytes "
            f"(e.g. data.decode('utf-8')) and {single}"
        )
    if not isinstance(value, Sequence):
        raise InvalidInputError(f"{name} must be a list of strings, got {_batch_advice(value)}")
    texts = list(value)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise InvalidInputError(
            f"{name}[{bad[0]}] is {type(texts[bad[0]]).__name__}, not a string "
            f"({len(bad)} of {len(texts)} items are not strings)"
        )
    for i, text in enumerate(texts):
        if type(text) is not str:
            texts[i] = text = str.__str__(text)
        _check_encodable(text, f"{name}[{i}]")
    if not texts and not allow_empty:
        raise InvalidInputError(f"{name} is empty: there is nothing to embed")
    return texts


def _check_encodable(text: str, name: str) -> None:
    # isascii() is a flag lookup: the common case costs no scan at all.
    if text.isascii():
        return
    found = _SURROGATE.search(text)
    if found is not None:
        count = len(_SURROGATE.findall(text))
        raise InvalidInputError(
            f"{name} is not valid Unicode: it holds {count} surrogate code point(s), the first "
            f"U+{ord(found.group()):04X} at character {found.start()}, which UTF-8 and so no "
            "tokenizer can encode (a split UTF-16 pair, or bytes decoded with "
            "errors='surrogateescape'); decode the source with errors='replace' or remove them"
        )


def _batch_advice(value: Any) -> str:
    kind = type(value).__name__
    if isinstance(value, Iterator):
        return f"{kind}, a one-shot iterator (left unconsumed); pass list(...) of it"
    if isinstance(value, Mapping):
        return f"{kind}; pass list(...) of its values (or keys) explicitly"
    if type(value).__module__ == "numpy":
        return f"numpy {kind}; pass .tolist() of it"
    return kind


def texts_from_iterable(value: Any, name: str = "texts") -> list[str]:
    """Like :func:`check_texts`, for interfaces that take any iterable of texts (LangChain's
    ``add_texts``): a generator is read once into a list; a single string, bytes, ``None`` or a
    non-iterable is refused by :func:`check_texts` before anything is read."""
    if isinstance(value, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        value, Iterable
    ):
        return check_texts(value, name)
    return check_texts(list(value), name)
