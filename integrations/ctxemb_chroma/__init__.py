"""ctxemb for Chroma (install with `pip install ctxemb[chroma]`).

The adapter itself is tracked in its own issue; this package reserves the import name.
"""

__all__: list[str] = []
