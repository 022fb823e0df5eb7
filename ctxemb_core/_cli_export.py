"""Moved to :mod:`ctxemb_core.cli.export`; this name stays importable for this release."""

from __future__ import annotations

from ctxemb_core.cli.export import add_parser, run

__all__ = ["add_parser", "run"]
