"""An evaluation path through a guarded Chroma collection (``ctxemb eval --via chroma``)."""

from __future__ import annotations

from typing import Any

__all__ = ["eval_path"]


def eval_path(client: Any, name: str, embedder: Any, **options: Any) -> Any:
    """Placeholder: being built."""
    raise NotImplementedError
