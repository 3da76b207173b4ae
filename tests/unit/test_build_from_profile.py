"""bin/build-from-profile: a counting build, a training load, a build from
the counts; and the plain build again whenever one of them fails, so that a
counting build never stays.  Run on a small project of one Cython module
(named ``dispatch``, as the counts it looks for), built for real with GCC;
the training load of the real modules is tests/integration/test_bench.py's.
bin/setup's own run of it is held to the modules loaded by
``test_the_modules_loaded_are_built_as_bin_setup_says``."""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

SETUP = """
from Cython.Build import cythonize
from setuptools import setup
COMPILED = [("dispatch", "dispatch.pyx")]
if __name__ == "__main__":
    import glob, os
    for old in glob.glob("dispatch.*.so") + glob.glob("build/lib.*/dispatch.*.so"):
        os.remove(old)          # as leaseq's setup.py: a module not built this time must not run from its old build
    built = cythonize(["dispatch.pyx"], quiet=True, compiler_directives={"language_level": "3"})
    for ext in built:
        ext.optional = True     # as leaseq's: a module the compiler refuses is left out, the build goes on
    setup(name="toy", ext_modules=built)
"""

TOY = '''
cdef extern from *:
    """
    #ifdef LEASEQ_PROFILE_USE
    #define GUIDED 1
    #else
    #define GUIDED 0
    #endif
    """
    int GUIDED

def guided():
    return bool(GUIDED)

def work(int n):
    cdef long total = 0
    for i in range(n):
        total += i % 7 if i & 1 else i % 5
    return total
'''


def load_script():
    path = str(ROOT / "bin" / "build-from-profile")
    loader = importlib.machinery.SourceFileLoader("leaseq_build_from_profile", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)             # (not __main__: nothing runs)
    return module


@pytest.fixture
def toy(tmp_path):
    """The toy project, installed: built once the plain way, as pip builds leaseq before bin/setup's rebuild."""
    (tmp_path / "setup.py").write_text(SETUP)
    (tmp_path / "dispatch.pyx").write_text(TOY)
    script = load_script()
    assert script.build(sys.executable, root=str(tmp_path))
    assert script.modules(sys.executable, root=str(tmp_path)) == ["dispatch"]
    return tmp_path


def run_toy(toy, code: str) -> str:
    """Import the toy's module in a process of its own (a counting build
    writes its counts when that process exits)."""
    done = subprocess.run([sys.executable, "-c", f"import dispatch; {code}"], cwd=toy, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def built(toy) -> bytes:
    (so,) = [p for p in toy.iterdir() if p.name.startswith("dispatch.") and p.suffix == ".so"]
    return so.read_bytes()


def steps(script, toy, train, build=None) -> dict:
    """``build_from_profile``'s steps for the toy: its own build and modules."""
    return {"build": build or functools.partial(script.build, root=str(toy)), "train": train,
            "modules": functools.partial(script.modules, root=str(toy))}


@pytest.mark.timeout(300)
def test_a_build_from_counts_of_the_training_load(toy):
    script = load_script()
    trained = []

    def train(_python):
        trained.append(run_toy(toy, "print(dispatch.work(100000), dispatch.guided())"))
        return True

    assert script.build_from_profile(sys.executable, **steps(script, toy, train)) == "profile-guided"
    assert trained == ["249997 False"]                                # the counting build ran the load
    assert b"__gcov" not in built(toy)                                 # and did not stay
    assert run_toy(toy, "print(dispatch.work(100000), dispatch.guided())") == "249997 True"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("failing", ["training", "no counts"])
def test_a_failed_step_leaves_the_plain_build(toy, failing, capsys):
    script = load_script()

    def train(_python):
        if failing == "no counts":
            return True                   # it said it ran, but nothing ran: no counts of dispatch
        run_toy(toy, "dispatch.work(10)")
        return False

    assert script.build_from_profile(sys.executable, **steps(script, toy, train)) == "plain"
    assert b"__gcov" not in built(toy)
    assert run_toy(toy, "print(dispatch.guided())") == "False"
    assert "the build from a profile failed" in capsys.readouterr().err
    assert not [p for p in toy.rglob("*.gcda")]


@pytest.mark.timeout(300)
def test_a_compiler_that_refuses_the_flags_leaves_the_plain_build(toy, monkeypatch):
    script = load_script()
    monkeypatch.setenv("CFLAGS", "-O2")     # kept, the profile's flags added to it
    plain = script.build

    def build(python, cflags="", ldflags="", root=str(toy)):
        if "profile-use" in cflags:
            cflags += " -fno-such-option-here"   # gcc refuses it: the module is left out, the build "succeeds"
        return plain(python, cflags, ldflags, root)

    def train(_python):
        run_toy(toy, "dispatch.work(10)")
        return True

    assert script.build_from_profile(sys.executable, **steps(script, toy, train, build)) == "plain"
    assert b"__gcov" not in built(toy) and run_toy(toy, "print(dispatch.guided())") == "False"


def test_when_even_the_plain_build_fails_setup_stops(capsys):
    script = load_script()
    with pytest.raises(SystemExit, match="plain build of the compiled modules failed too"):
        script.build_from_profile(sys.executable, build=lambda *a, **k: False, train=lambda _p: True,
                                  counted=lambda _d: True, modules=lambda _p: [])


def test_the_modules_loaded_are_built_as_bin_setup_says():
    """bin/setup writes what bin/build-from-profile did beside the venv's
    Python; INFO's leaseq_profile_guided says the same of the modules."""
    from leaseq.daemon import flavour
    stamp = pathlib.Path(sys.prefix) / ".leaseq-build"
    said = stamp.read_text().strip() if stamp.exists() else "no bin/setup"
    if os.environ.get("LEASEQ_PURE") == "1":
        assert flavour.PROFILE_GUIDED is False
    else:
        assert flavour.PROFILE_GUIDED is (said == "profile-guided"), said
