"""What ``qdrant-client`` + fastembed wrote: found, its contract detected, and adopted only when
the match is conclusive.

``qdrant-client``'s fastembed helpers (``QdrantClient.add``, until 1.17) laid a collection out
the same way every time: one named vector ``fast-{model}`` (the model's name after its last
``/``, lower-cased: ``fast-all-minilm-l6-v2``; ``fast-sparse-{model}`` beside it for a sparse
model) of the model's width under its distance, and each point's payload ``{"document": text,
**metadata}`` under a random UUID. The vector's name is all it says about the model: no
revision, no pooling, no normalisation, no prefix.

:func:`detect_fastembed` recognises that layout, maps the name to the models it can be (those
whose name gives it), and re-embeds a sample of the stored documents under each candidate recipe
(core's :func:`~ctxemb_core.detect.detect_driver` over a :class:`~ctxemb_qdrant._named.
NamedVectorView` of that vector). :func:`adopt_fastembed` writes the detected contract's stamp
for that named vector only when the report is conclusive: every sampled record reproduced by
one recipe within tolerance, and no other recipe doing as well.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from qdrant_client import QdrantClient

from ctxemb_core.contract import same_contract
from ctxemb_core.detect import DEFAULT_MODEL, DetectReport, detect_driver
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import InvalidInputError, StampError
from ctxemb_core.remedy import Said
from ctxemb_core.stamp import IndexStamp
from ctxemb_qdrant._named import NamedVectorView, _info, _vector_params
from ctxemb_qdrant._serving import FASTEMBED_TEXT, fastembed_vector

__all__ = [
    "FASTEMBED_TEXT",
    "FastembedFinding",
    "adopt_fastembed",
    "detect_fastembed",
    "detect_or",
    "fastembed_layout",
    "fastembed_vector_name",
]

#: The models ctxemb can run whose fastembed vector name a collection may carry.
KNOWN_MODELS = (DEFAULT_MODEL,)


#: Naming the models a collection may have been written with, for Python and the CLI.
_CANDIDATES = Said("ctxemb_qdrant.detect(client, name, *models)", "ctxemb detect --model ...")


def fastembed_vector_name(model: str) -> str:
    """The vector name ``qdrant-client``'s fastembed helpers gave model ``model``."""
    return f"fast-{model.split('/')[-1].lower()}"


@dataclass(frozen=True)
class FastembedFinding:
    """A collection in fastembed's layout and what its documents say.

    Attributes:
        collection: the collection.
        vector: the fastembed vector's name (``fast-all-minilm-l6-v2``).
        models: the models that name can be.
        report: the detection over a sample of its documents.
    """

    collection: str
    vector: str
    models: tuple[str, ...]
    report: DetectReport

    @property
    def conclusive(self) -> bool:
        return bool(self.report.conclusive)

    def describe(self) -> str:
        head = (
            f"collection {self.collection!r}: written by qdrant-client + fastembed (vector "
            f"{self.vector!r}, payload {FASTEMBED_TEXT!r}); the name can be {list(self.models)}"
        )
        best = self.report.best
        found = "no recipe" if best is None else best.label
        verdict = "conclusive" if self.conclusive else "not conclusive"
        return f"{head}; its documents: {found} ({verdict})"


def _fastembed_vector(client: QdrantClient, collection: str) -> str:
    info = _info(client, collection)
    if info is None:
        raise InvalidInputError(f"collection {collection!r} does not exist")
    names = [n for n in _vector_params(info) if n.startswith("fast-")]
    if len(names) != 1:
        raise InvalidInputError(
            f"collection {collection!r} is not in qdrant-client + fastembed's layout: it has "
            f"vectors {sorted(_vector_params(info))}, not one named fast-<model>"
        )
    return names[0]


def detect_fastembed(
    client: QdrantClient, collection: str, *models: Any, sample: int = 16
) -> FastembedFinding:
    """Recognise ``collection`` as written by ``qdrant-client`` + fastembed and detect its
    contract from a sample of its documents (``models``: the candidates; default: the models
    ctxemb can run whose fastembed name the vector carries).

    Raises:
        InvalidInputError: no such collection, or not fastembed's layout; no candidate model.
    """
    vector = _fastembed_vector(client, collection)
    named = tuple(m for m in KNOWN_MODELS if fastembed_vector_name(m) == vector)
    candidates = models or named
    if not candidates:
        raise _CANDIDATES.into(
            InvalidInputError,
            f"vector {vector!r} names no model ctxemb knows by that name; name the candidate "
            "models ({do})",
        )
    found = detect_driver(_view(client, collection, vector), *candidates, sample=sample)
    report = _named_as(found, vector)
    return FastembedFinding(collection, vector, named, report)


def adopt_fastembed(
    client: QdrantClient, collection: str, *models: Any, sample: int = 16
) -> FastembedFinding:
    """:func:`detect_fastembed`, then stamp the fastembed vector with the detected contract,
    only when the match is conclusive (nothing is written otherwise, and the finding says why).

    Raises:
        StampError: the vector is stamped already with another contract.
    """
    finding = detect_fastembed(client, collection, *models, sample=sample)
    if not finding.conclusive:
        return finding
    view = _view(client, collection, finding.vector)
    read = view.read_stamp()
    assert read is not None  # detect_fastembed found the vector
    best = finding.report.best
    assert best is not None  # a conclusive finding names its contract
    embedder = Embedder(best.contract)
    stamp = IndexStamp.from_embedder(embedder)
    held: Mapping[str, Any] | None = read.metadata
    if held:
        if not same_contract(IndexStamp.from_metadata(held).contract, stamp.contract):
            raise StampError(
                f"vector {finding.vector!r} of {collection!r} is stamped with another contract; "
                "nothing was written"
            )
        return finding
    if not view.write_stamp(stamp, stamp_version=read.head.stamp_version):
        raise StampError(f"collection {collection!r} changed while it was adopted; run it again")
    return finding


def fastembed_layout(client: QdrantClient, collection: str) -> str | None:
    """The fastembed vector's name when ``collection`` is in fastembed's layout (one
    ``fast-<model>`` vector, no unnamed one: :func:`~ctxemb_qdrant._serving.fastembed_vector`),
    else ``None`` (also when there is no such collection: the store's own calls then say so)."""
    try:
        info = _info(client, collection)
    except InvalidInputError:
        return None
    return None if info is None else fastembed_vector(_vector_params(info))


def _view(client: QdrantClient, collection: str, vector: str) -> NamedVectorView:
    return NamedVectorView(client, collection, vector, text_key=FASTEMBED_TEXT, metadata_key=None)


def _named_as(report: DetectReport, vector: str) -> DetectReport:
    """``report``, not conclusive where its best model is not the one ``vector``'s name
    claims: fastembed named the vector after the model that wrote it."""
    best = report.best
    if not report.conclusive or best is None:
        return report
    claimed = fastembed_vector_name(best.contract.model)
    if claimed == vector:
        return report
    why = (
        f"the vector's name {vector!r} claims another model than the one whose vectors it "
        f"holds ({best.contract.model}, whose fastembed name is {claimed!r})"
    )
    return replace(report, conclusive=False, unknown=(why, *report.unknown))


def detect_or(detect: Any) -> Any:
    """The adapter's ``detect`` (``ctxemb detect``): a collection in fastembed's layout is read
    through its fastembed vector (the candidates: the models named, else those its name can
    be; a name ctxemb knows no model by is refused, as :func:`detect_fastembed` refuses it),
    and is conclusive only for the model its vector's name claims; any other through
    ``detect``."""

    @functools.wraps(detect)
    def detecting(client: Any, name: str, *models: Any, **options: Any) -> Any:
        vector = fastembed_layout(client, name) if isinstance(client, QdrantClient) else None
        if vector is None:
            return detect(client, name, *models, **options)
        named = tuple(m for m in KNOWN_MODELS if fastembed_vector_name(m) == vector)
        if not (models or named):
            raise _CANDIDATES.into(
                InvalidInputError,
                f"collection {name!r}: fastembed's vector {vector!r} names no model ctxemb "
                "knows by that name; name the candidate models ({do})",
            )
        report = detect_driver(_view(client, name, vector), *(models or named), **options)
        return _named_as(report, vector)

    return detecting
