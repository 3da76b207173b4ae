"""One source, two flavours (docs/performance.md): a module compiled from
its own ``.py`` runs as a build in the compiled flavour and from that very
``.py`` with LEASEQ_PURE=1; and the class a reader opens is the class that
runs: no method of a class of daemon/, commands/ or storage/ is a function
of another module (a compiled copy put in its place at import); what the
standard library makes for a class (a dataclass's ``__getstate__``, a
Protocol's ``__init__``, a NamedTuple's ``__new__``) is its own; and no
.py module there reads a private attribute of another object."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import shutil
import subprocess
import sys

import pytest
from harness import ROOT, load_setup

PURE = os.environ.get("LEASEQ_PURE") == "1"
ROOMS = ("daemon", "commands", "storage")



@pytest.mark.parametrize("name, path", load_setup().ONE_SOURCE)
def test_a_one_source_module_runs_from_its_source_only_when_pure(name, path):
    module = importlib.import_module(name)
    if PURE:
        assert module.__file__ == str(ROOT / path)
    elif shutil.which("cc") or shutil.which("gcc"):       # (bin/setup builds it wherever there is a C compiler)
        assert not module.__file__.endswith(".py") and os.path.dirname(module.__file__) == str((ROOT / path).parent)
    else:
        assert module.__file__ == str(ROOT / path)
    assert (ROOT / path).with_suffix(".pxd").is_file()     # its C types, beside it


def _modules():
    for room in ROOMS:
        for info in pkgutil.iter_modules([str(ROOT / room)]):
            if not info.name.startswith("_"):              # (the compiled twins: .pyx modules of their own)
                yield f"leaseq.{room}.{info.name}"


def _methods(cls):
    """(name, function) of what ``cls`` defines itself that runs as a method."""
    for name, value in vars(cls).items():
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if value is not None and (inspect.isfunction(value) or type(value).__name__ == "cython_function_or_method"):
            yield name, value


def test_every_method_is_defined_in_its_own_class():
    moved = []
    for module_name in _modules():
        module = importlib.import_module(module_name)
        for cls in vars(module).values():
            if not isinstance(cls, type) or cls.__module__ != module_name:
                continue
            for name, function in _methods(cls):
                home = function.__module__ or ""
                made = home.partition(".")[0] in sys.stdlib_module_names or home.startswith("namedtuple_")
                if home != module_name and not made:
                    moved.append(f"{module_name}.{cls.__qualname__}.{name}")
    assert moved == []


def test_the_walk_finds_a_method_put_in_place(monkeypatch):
    """(The walk above sees a replacement: one put there by the test.)"""
    from leaseq.daemon.holdings import Holdings

    def release_all(self):
        pass

    monkeypatch.setattr(Holdings, "release_all", release_all)
    with pytest.raises(AssertionError, match="Holdings.release_all"):
        test_every_method_is_defined_in_its_own_class()


# Private attributes read on something other than ``self`` or ``cls``, each a
# debt to pay (the list may only shrink): storage/index.py reaches into
# sortedcontainers' SortedList for its bulk pops and appends.
PRIVATE_READS_ALLOWED = {
    ("storage/index.py", "_len"), ("storage/index.py", "_lists"), ("storage/index.py", "_maxes"),
    ("storage/index.py", "_load"), ("storage/index.py", "_index"), ("storage/index.py", "_expand"),
    ("daemon/snapshots.py", "_exit"),           # os._exit: public, for a forked child
}


def private_reads(source: str) -> set[str]:
    """The private attributes ``source`` reads on something other than
    ``self`` or ``cls``."""
    import ast

    return {node.attr for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))}


def test_no_private_attribute_is_read_from_another_object():
    """``x._name`` only on ``self`` or ``cls`` in the .py files of daemon/,
    commands/ and storage/: what another module needs of a class is public,
    or declared in the class's .pxd."""
    found = {(f"{room}/{path.name}", name) for room in ROOMS for path in sorted((ROOT / room).glob("*.py"))
             for name in private_reads(path.read_text(encoding="utf-8"))}
    assert found <= PRIVATE_READS_ALLOWED, sorted(found - PRIVATE_READS_ALLOWED)
    assert PRIVATE_READS_ALLOWED <= found, sorted(PRIVATE_READS_ALLOWED - found)     # (paid: take it off the list)


def test_private_reads_sees_another_objects_private_attribute():
    assert private_reads("log._written\nself._own\ncls._also\nx.__class__\nlog.public\n") == {"_written"}


def test_the_compiled_flavour_loads_whichever_module_is_imported_first():
    """The compiled modules cimport each other's types: whichever module of
    the daemon a process imports first, every compiled module is in use
    afterwards (an import cycle could leave one out, silently, as if it
    were not built)."""
    if PURE or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("the compiled flavour is built by bin/setup, not run with LEASEQ_PURE=1")
    names = [info.name for info in pkgutil.iter_modules([str(ROOT / "daemon")])]
    code = "import importlib, sys; importlib.import_module(sys.argv[1]); from leaseq.daemon import flavour; " \
           "print(flavour.FLAVOUR == 'compiled')"
    children = [(name, subprocess.Popen([sys.executable, "-c", code, f"leaseq.daemon.{name}"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)) for name in names]
    failed = []
    for name, child in children:
        out, err = child.communicate(timeout=120)
        if child.returncode != 0 or out.strip() != "True":
            failed.append((name, out.strip(), err.strip()[-500:]))
    assert failed == []
