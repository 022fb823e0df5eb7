"""ctxemb for Haystack (install with `pip install ctxemb[haystack]`).

The adapter itself is tracked in its own issue; this package reserves the import name.
"""

__all__: list[str] = []
