"""Which flavour runs (docs/performance.md, "One source, two flavours").

The compiled flavour is built at install time when Cython and a C compiler
are there (setup.py).  Some modules are compiled from their own ``.py``
file, with the C types of a ``.pxd`` beside it (``storage/logbuffer.py``,
``daemon/outbox.py`` ...): the build lands beside the source and Python's
import takes it first.  ``LEASEQ_PURE=1`` runs the pure flavour: the
finder installed here (by the ``leaseq.storage`` and ``leaseq.daemon``
packages, before any of their modules) loads such a module from its
``.py`` instead, so the two flavours run the same source.

The other compiled modules are separate implementations of one contract
(the RESP codec, the indexes, the job, the clock) or code not yet written
once, each asked for with ``compiled_twin``."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys

PURE = os.environ.get("LEASEQ_PURE") == "1"


def compiled_twin(name: str):
    """The compiled module ``name`` (``"leaseq.storage._job"`` ...), or None
    when LEASEQ_PURE=1 or it was not built (no C compiler at install time):
    then the pure module that asked serves on its own."""
    if PURE:
        return None
    try:
        return importlib.import_module(name)
    except (ImportError, ValueError, TypeError):
        # not built; or built against a one-source class that did not build
        # (a compiled module checks the layout of each class it cimports:
        # ValueError "... size changed", TypeError "... is not a type object")
        return None


def is_compiled(module) -> bool:
    """Whether ``module`` runs compiled (a build, not its ``.py``)."""
    return not (module.__file__ or "").endswith(".py")


class SourceFirst(importlib.abc.MetaPathFinder):
    """Finds a ``leaseq`` module at its ``.py`` source when there is one,
    ahead of a build of it beside the source."""

    def find_spec(self, name, path, target=None):
        if not name.startswith("leaseq.") or not path:
            return None
        leaf = name.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(name, source)
        return None


def install() -> None:
    """With LEASEQ_PURE=1, put ``SourceFirst`` first on ``sys.meta_path``
    (once)."""
    if PURE and not any(isinstance(f, SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFirst())
