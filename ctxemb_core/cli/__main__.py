"""``python -m ctxemb_core.cli``: the ``ctxemb`` command."""

from __future__ import annotations

import sys

from ctxemb_core.cli.app import main

sys.exit(main())
