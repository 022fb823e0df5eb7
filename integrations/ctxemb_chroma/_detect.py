"""Which contract wrote a Chroma collection of unknown provenance (``ctxemb detect``)."""

from __future__ import annotations

from typing import Any

__all__ = ["detect"]


def detect(client: Any, name: str, *models: Any, **options: Any) -> Any:
    """Placeholder: being built."""
    raise NotImplementedError
