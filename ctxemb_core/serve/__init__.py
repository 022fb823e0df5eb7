"""``ctxemb serve``: one contract over HTTP, OpenAI-compatible, its stamp open for any client.

:class:`EmbeddingService` is the ASGI application (any ASGI server runs it); :func:`serve` runs
it on uvicorn (``pip install 'ctxemb[serve]'``), which is all the command does. The service
imports no torch of its own: an export or a static model is served with the base install and
uvicorn. Given a mapping of model ids to embedders, one server serves several contracts, one
model id each (both sides of an upgrade; ``ctxemb serve --also``).

Example:
    >>> from ctxemb_core import Embedder, contract_for
    >>> from ctxemb_core.serve import serve
    >>> embedder = Embedder(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
    >>> serve(embedder, port=8080)  # doctest: +SKIP
"""

from __future__ import annotations

from ctxemb_core.serve.app import EmbeddingService
from ctxemb_core.serve.limits import ServeLimits
from ctxemb_core.serve.run import serve

__all__ = ["EmbeddingService", "ServeLimits", "serve"]
