"""The Qdrant adapter's two defaults, in a module that imports nothing: the command line's
options (``ctxemb_qdrant.cli``) read them without importing qdrant-client, and ``_store``
applies them."""

#: Where a store is kept without ``path`` or ``url`` (the embedded default).
DEFAULT_PATH = "./qdrant"
#: The environment variable a server's API key is read from when none is given (never shown).
API_KEY_ENV = "CTXEMB_QDRANT_API_KEY"
