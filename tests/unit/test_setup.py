"""setup.py: a module Cython refuses is left out, and the install goes on
with its pure-Python module (the README's setup command must not fail
because one .pyx does not translate)."""

from importlib.machinery import EXTENSION_SUFFIXES
import pathlib

from harness import ROOT, load_setup


def test_every_compiled_module_has_its_source():
    for name, path in load_setup().COMPILED:
        assert (ROOT / path).is_file(), path
        assert name.rsplit(".", 1)[1] == pathlib.Path(path).stem


def test_the_flavour_knows_every_compiled_module_of_the_daemon():
    """INFO's leaseq_flavour says "compiled" only when all of them loaded:
    a module added to setup.py must be added to its list too."""
    from leaseq.daemon.flavour import DAEMON_COMPILED
    names = [name for name, _path in load_setup().COMPILED if not name.startswith("leaseq.bench.")]
    assert sorted(name.rsplit(".", 1)[1] for name in names) == sorted(DAEMON_COMPILED)


def test_a_module_cython_refuses_is_left_out_and_the_others_build(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LEASEQ_PURE_BUILD", raising=False)
    monkeypatch.chdir(tmp_path)          # (the build links its cimport folder under ./build)
    good, bad = tmp_path / "good.pyx", tmp_path / "bad.pyx"
    good.write_text("cdef int twice(int x):\n    return 2 * x\n\ndef four():\n    return twice(2)\n")
    bad.write_text("cdef int broken(int x)\n    return x\n")       # no colon: Cython refuses it
    built = load_setup().extensions([("x.bad", str(bad)), ("x.good", str(good))])
    assert [e.name for e in built] == ["x.good"]
    assert all(e.optional for e in built)           # a C compiler's failure is skipped as well
    err = capsys.readouterr().err
    assert f"{bad} is not compiled" in err and "pure-Python module serves instead" in err
    assert "good.pyx" not in err


def test_pure_build_builds_nothing(monkeypatch):
    monkeypatch.setenv("LEASEQ_PURE_BUILD", "1")
    assert load_setup().extensions() == []


def test_a_module_the_c_compiler_refuses_does_not_stop_the_build(tmp_path, monkeypatch, capfd):
    from setuptools import Distribution
    monkeypatch.delenv("LEASEQ_PURE_BUILD", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fine.pyx").write_text("def one():\n    return 1\n")
    (tmp_path / "nohdr.pyx").write_text('cdef extern from "no_such_header_here.h":\n    int nothing\n'
                                        "def zero():\n    return nothing\n")
    built = load_setup().extensions([("nohdr", "nohdr.pyx"), ("fine", "fine.pyx")])
    assert [e.name for e in built] == ["nohdr", "fine"]        # Cython translates both; gcc will refuse one
    dist = Distribution({"name": "t", "ext_modules": built})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    dist.run_command("build_ext")                              # no exception: the failing one is skipped
    names = [p.name for p in tmp_path.iterdir() if p.suffix == ".so"]
    assert any(n.startswith("fine.") for n in names) and not any(n.startswith("nohdr.") for n in names)
    assert "no_such_header_here.h" in capfd.readouterr().err


def test_old_builds_beside_the_sources_are_removed_before_a_build(tmp_path):
    """And build_ext's copies under build/lib.*, which an in-place build
    would copy back beside the sources when a module fails to build."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "build" / "lib.linux-x86_64-cpython-311" / "leaseq" / "pkg").mkdir(parents=True)
    keep = ["pkg/_a.pyx", "pkg/_a.c", "pkg/_b.pyx", "pkg/other.cpython-311-x86_64-linux-gnu.so",
            "build/lib.linux-x86_64-cpython-311/leaseq/pkg/other.so"]
    old = [f"pkg/_a{EXTENSION_SUFFIXES[0]}", "pkg/_b.abi3.so", "pkg/_b.so",
           f"build/lib.linux-x86_64-cpython-311/leaseq/pkg/_a{EXTENSION_SUFFIXES[0]}"]
    for name in keep + old:
        (tmp_path / name).write_text("x")
    gone = load_setup().remove_old_builds([("leaseq.pkg._a", "pkg/_a.pyx"), ("leaseq.pkg._b", "pkg/_b.pyx")],
                                          str(tmp_path))
    assert sorted(pathlib.Path(g).relative_to(tmp_path).as_posix() for g in gone) == sorted(old)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(keep)


def test_a_module_cimports_another_by_its_name_in_the_package(tmp_path, capsys, monkeypatch):
    """``from leaseq.storage._a cimport ...`` in storage/_b.pyx finds
    storage/_a.pxd, though only pyproject.toml's package-dir says that
    storage/ is ``leaseq.storage``: the build links it under build/cimport."""
    monkeypatch.delenv("LEASEQ_PURE_BUILD", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "_a.pxd").write_text("cdef int twice(int x)\n")
    (tmp_path / "storage" / "_a.pyx").write_text("cdef int twice(int x):\n    return 2 * x\n")
    (tmp_path / "storage" / "_b.pyx").write_text("from leaseq.storage._a cimport twice\n\n"
                                                 "def four():\n    return twice(2)\n")
    setup = load_setup()
    built = setup.extensions([("leaseq.storage._a", "storage/_a.pyx"), ("leaseq.storage._b", "storage/_b.pyx")])
    assert [e.name for e in built] == ["leaseq.storage._a", "leaseq.storage._b"]
    assert "not compiled" not in capsys.readouterr().err
    link = tmp_path / "build" / "cimport" / "leaseq" / "storage"
    assert link.is_symlink() and link.resolve() == (tmp_path / "storage").resolve()
    assert "__pyx_capi__" in (tmp_path / "storage" / "_a.c").read_text()     # _a exports twice to _b
    assert "twice" in (tmp_path / "storage" / "_b.c").read_text()


def test_a_link_left_by_a_checkout_that_moved_is_made_again(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "storage").mkdir()
    (tmp_path / "daemon").mkdir()
    (tmp_path / "build" / "cimport" / "leaseq").mkdir(parents=True)
    stale = tmp_path / "build" / "cimport" / "leaseq" / "storage"
    stale.symlink_to(tmp_path / "old")
    top = load_setup().cimport_path(str(tmp_path))
    assert pathlib.Path(top) == tmp_path / "build" / "cimport"
    for folder in ("storage", "daemon"):
        assert (pathlib.Path(top) / "leaseq" / folder).resolve() == (tmp_path / folder).resolve()
