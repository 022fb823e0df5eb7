"""The version of the ctxemb distribution (``ctxemb_core.__version__``), importable without the
package's ``__init__`` (which imports the embedder and everything below it)."""

__version__ = "0.1.0"
