"""What a store's author tests their driver with: :mod:`ctxemb_core.testing.conformance`
(imports pytest; nothing else in ctxemb imports this package)."""
