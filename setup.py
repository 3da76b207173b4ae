"""The compiled hot path (docs/performance.md): Cython modules built at
install time when Cython and a C compiler are there, each optional, so
that a machine without a compiler installs the pure-Python modules
(``LEASEQ_PURE=1`` also picks those at run time).  Everything else about
the package is in pyproject.toml."""

import os

from setuptools import Extension, setup

COMPILED = [("leaseq.daemon._resp", "daemon/_resp.pyx"), ("leaseq.daemon._parser", "daemon/_parser.pyx"),
            ("leaseq.storage._job", "storage/_job.pyx"), ("leaseq.storage._jobtable", "storage/_jobtable.pyx"),
            ("leaseq.storage._index", "storage/_index.pyx"), ("leaseq.daemon._clock", "daemon/_clock.pyx")]


def extensions() -> list:
    if os.environ.get("LEASEQ_PURE_BUILD") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    return cythonize([Extension(name, [path], optional=True) for name, path in COMPILED],
                     compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=extensions())
