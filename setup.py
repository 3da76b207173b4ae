"""The compiled hot path (docs/performance.md): Cython modules built at
install time when Cython and a C compiler are there, each optional, so
that a machine without a compiler installs the pure-Python modules
(``LEASEQ_PURE=1`` also picks those at run time).  ``ONE_SOURCE`` are
ordinary .py modules that Cython compiles as they are, with the C types of
the .pxd beside each (pure-Python mode: their annotations are for readers
and type checkers, the .pxd is what Cython reads); ``COMPILED`` are .pyx
modules.  Everything else about the package is in pyproject.toml."""

import glob
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES

from setuptools import Extension, setup

ONE_SOURCE = [("leaseq.storage.bands", "storage/bands.py"), ("leaseq.storage.logbuffer", "storage/logbuffer.py"),
              ("leaseq.daemon.outbox", "daemon/outbox.py"), ("leaseq.daemon.timeouts", "daemon/timeouts.py"),
              ("leaseq.daemon.connection", "daemon/connection.py"), ("leaseq.daemon.committer", "daemon/committer.py"),
              ("leaseq.daemon.dispatch", "daemon/dispatch.py"), ("leaseq.daemon.blocking", "daemon/blocking.py"),
              ("leaseq.daemon.waiter", "daemon/waiter.py"), ("leaseq.storage.indexes", "storage/indexes.py"),
              ("leaseq.storage.queue", "storage/queue.py"), ("leaseq.storage.store", "storage/store.py"),
              ("leaseq.daemon.faults", "daemon/faults.py"), ("leaseq.commands.claims", "commands/claims.py"),
              ("leaseq.storage.plain", "storage/plain.py"), ("leaseq.storage.journal", "storage/journal.py"),
              ("leaseq.commands.parties", "commands/parties.py"), ("leaseq.commands.args", "commands/args.py"),
              ("leaseq.commands.queues", "commands/queues.py"), ("leaseq.commands.jobs", "commands/jobs.py"),
              ("leaseq.daemon.metrics", "daemon/metrics.py")]

COMPILED = ONE_SOURCE + [("leaseq.daemon._resp", "daemon/_resp.pyx"), ("leaseq.daemon._parser", "daemon/_parser.pyx"),
            ("leaseq.daemon._logthread", "daemon/_logthread.pyx"),
            ("leaseq.storage._job", "storage/_job.pyx"), ("leaseq.storage._jobtable", "storage/_jobtable.pyx"),
            ("leaseq.storage._index", "storage/_index.pyx"), ("leaseq.storage._clock", "storage/_clock.pyx"),
            ("leaseq.bench._minimal", "bench/_minimal.pyx")]     # a benchmark's instrument (bench/floor.py)


CIMPORTED = ("daemon", "storage", "commands")   # the folders whose .pxd files compiled modules cimport, as leaseq.<folder>


def cimport_path(root: str = ".") -> str:
    """A folder in which ``leaseq/storage/_index.pxd`` is storage/_index.pxd:
    Cython finds what ``from leaseq.storage._index cimport ...`` names by
    the package's name, which only pyproject.toml's package-dir maps to
    the folders at the top (a link for each, under build/)."""
    top = os.path.join(root, "build", "cimport")
    os.makedirs(os.path.join(top, "leaseq"), exist_ok=True)
    for folder in CIMPORTED:
        link, target = os.path.join(top, "leaseq", folder), os.path.abspath(os.path.join(root, folder))
        if os.path.islink(link) and os.path.realpath(link) != os.path.realpath(target):
            os.remove(link)           # (a link left by a checkout that has moved since)
        if not os.path.islink(link):
            os.symlink(target, link)
    return top


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
    built, include = [], [cimport_path()]
    for name, path in compiled:
        try:
            directives = {"language_level": "3"}
            if path.endswith(".py"):
                directives["annotation_typing"] = False
            built += cythonize([Extension(name, [path])], compiler_directives=directives, quiet=True,
                               include_path=include)
        except Exception as e:       # Cython's CompileError, or any failure of its own
            print(f"warning: leaseq: {path} is not compiled ({type(e).__name__}: {e}); "
                  f"the pure-Python module serves instead", file=sys.stderr)
    for ext in built:
        ext.optional = True          # (cythonize's copies drop the flag: set it on what it returns)
    return built


def remove_old_builds(compiled=COMPILED, root: str = ".") -> list[str]:
    """Delete the builds an editable install left beside each module's
    source (``daemon/dispatch.cpython-311-x86_64-linux-gnu.so`` ...), and
    build_ext's own copies under build/lib.*/, before building again: a
    module that is not built this time (Cython or the C compiler refused
    it, or LEASEQ_PURE_BUILD=1) must not go on running from its old build
    while pip, which hides setup's warnings, reports success (an in-place
    build copies what build/lib.* holds into the tree, built this time or
    not).  Returns what it deleted."""
    gone = []
    for name, path in compiled:
        stems = [os.path.join(root, os.path.splitext(path)[0])]
        stems += [os.path.join(lib, *name.split(".")) for lib in glob.glob(os.path.join(root, "build", "lib.*"))]
        for stem in stems:
            for suffix in EXTENSION_SUFFIXES:
                if os.path.exists(stem + suffix):
                    os.remove(stem + suffix)
                    gone.append(stem + suffix)
    return gone


if __name__ == "__main__":           # (setuptools runs this file as __main__; tests import it)
    remove_old_builds()
    # the C compiler runs on every core (build_ext --parallel), for pip's build and bin/build-from-profile's alike
    setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
