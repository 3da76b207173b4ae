"""The compiled hot path (docs/performance.md): Cython modules built at
install time when Cython and a C compiler are there, each optional, so
that a machine without a compiler installs the pure-Python modules
(``LEASEQ_PURE=1`` also picks those at run time).  Everything else about
the package is in pyproject.toml."""

import os
import sys

from setuptools import Extension, setup

COMPILED = [("leaseq.daemon._resp", "daemon/_resp.pyx"), ("leaseq.daemon._parser", "daemon/_parser.pyx"),
            ("leaseq.storage._job", "storage/_job.pyx"), ("leaseq.storage._jobtable", "storage/_jobtable.pyx"),
            ("leaseq.storage._index", "storage/_index.pyx"), ("leaseq.daemon._clock", "daemon/_clock.pyx"),
            ("leaseq.daemon._lane", "daemon/_lane.pyx")]


def extensions(compiled=COMPILED) -> list:
    """The extensions to build: each module Cython translates, one by one.
    A module Cython refuses (a newer Cython that reads it differently) is
    left out with a warning and its pure module serves, as when the C
    compiler fails on one (``optional``, which build_ext reads: it warns
    and goes on): the install goes on either way."""
    if os.environ.get("LEASEQ_PURE_BUILD") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    built = []
    for name, path in compiled:
        try:
            built += cythonize([Extension(name, [path])], compiler_directives={"language_level": "3"}, quiet=True)
        except Exception as e:       # Cython's CompileError, or any failure of its own
            print(f"warning: leaseq: {path} is not compiled ({type(e).__name__}: {e}); "
                  f"the pure-Python module serves instead", file=sys.stderr)
    for ext in built:
        ext.optional = True          # (cythonize's copies drop the flag: set it on what it returns)
    return built


if __name__ == "__main__":           # (setuptools runs this file as __main__; tests import it)
    setup(ext_modules=extensions())
