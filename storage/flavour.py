"""Which flavour runs: the compiled twin of a module, when it was built and
LEASEQ_PURE is not 1 (docs/performance.md, "Two flavours, one behaviour")."""

from __future__ import annotations

import importlib
import os


def compiled_twin(name: str):
    """The compiled module ``name`` (``"leaseq.storage._job"`` ...), or None
    when LEASEQ_PURE=1 or it was not built (no C compiler at install time):
    then the pure module that asked serves on its own."""
    if os.environ.get("LEASEQ_PURE") == "1":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
