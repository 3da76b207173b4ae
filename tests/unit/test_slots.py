"""``Slots`` (storage/_slots.pxi): the compiled lane
read the daemon's objects at their slots' offsets.  Two things are held
here: every name they read is a slot of the class they name (a name that is
not, say a property added later, would still be read right, by ``getattr``,
but slowly, and nothing else would notice), and a read or write through
``Slots`` gives what ``getattr`` and ``setattr`` give for any object: of
the class, of a subclass that overrides a name, of an unrelated class, or
one whose slot is empty.  The modules are compiled code only: with
LEASEQ_PURE=1 this module skips, saying so."""

from __future__ import annotations

import importlib
import types

import pytest
from harness import compiled

MODULES = ("leaseq.daemon._lane",)


def _layouts():
    out = []
    for name in MODULES:
        module = compiled(name)
        out += [(name, s) for s in module.layouts()]
    return out


def _class(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("module, slots", _layouts(), ids=lambda v: v if isinstance(v, str) else v.of)
def test_every_name_read_is_a_slot_of_its_class(module, slots):
    cls = _class(slots.of)
    not_slots = [n for n in slots.names if type(getattr(cls, n, None)) is not types.MemberDescriptorType]
    assert not not_slots, f"{module} reads {slots.of}.{not_slots} through Slots: declare them in __slots__"


def _slots_for(names):
    """A ``Slots`` of the lane's own module, learning any class (``of`` is
    only what the daemon's tables say)."""
    lane = compiled("leaseq.daemon._lane")
    return type(lane.layouts()[0])("test.Point", names)


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


class Shifted(Point):
    __slots__ = ()

    @property
    def y(self):                      # a subclass that makes one name a property
        return "shifted"

    @y.setter
    def y(self, value):
        Point.y.__set__(self, value + 1)


class Loose:                          # no slots: an instance dictionary
    def __init__(self, x, y):
        self.x, self.y = x, y


def test_reads_and_writes_agree_with_getattr_and_setattr_whatever_the_class():
    s = _slots_for(("x", "y"))
    p, q, loose, shifted = Point(1, 2), Point(3, 4), Loose(5, 6), Shifted(7, 8)
    for obj in (p, loose, shifted, q, p):           # classes alternate: each is learnt again
        for i, name in enumerate(("x", "y")):
            assert s.read(obj, i) == getattr(obj, name)
    assert s.generic() == []                        # p, learnt last: both are slots
    s.read(shifted, 0)
    assert s.generic() == ["y"]                     # the property is read by getattr
    s.write(p, 0, "a")
    s.write(loose, 1, "b")
    s.write(shifted, 1, 10)
    assert (p.x, loose.y, Point.y.__get__(shifted)) == ("a", "b", 11)
    old = object()
    p.y = old
    s.write(p, 1, None)                             # the old value is released, the new one held
    assert p.y is None
    import sys
    assert sys.getrefcount(old) == 2


def test_an_empty_slot_raises_as_getattr_does():
    s = _slots_for(("x", "y"))
    p = Point(1, 2)
    del p.y
    with pytest.raises(AttributeError, match="y"):
        s.read(p, 1)
    s.write(p, 1, 3)
    assert p.y == 3
    with pytest.raises(AttributeError):
        s.read(object(), 0)                         # no such attribute at all


def test_the_daemons_objects_are_read_at_their_offsets(monkeypatch):
    """A server and connections made as the daemon makes them, serving jobs
    one at a time (``leaseq bench path``'s single round, in one process: a
    parked claim, the push that wakes it, the ack): afterwards every
    ``Slots`` of both modules learnt the class it names (or a subclass: the
    log is a ``WriteAheadLog``), and reads none of its names by ``getattr``.  (The daemon is given both modules, so that
    with LEASEQ_PURE=1 too they run.)"""
    from leaseq.bench import path
    from leaseq.daemon import dispatch
    lane = compiled("leaseq.daemon._lane")
    monkeypatch.setattr(dispatch, "lane", lane.run)
    monkeypatch.setattr(dispatch, "serve_plain", lane.serve_plain)
    path.loop("single", rounds=1, repeats=1)
    for module, s in _layouts():
        assert s.learnt is not None and issubclass(s.learnt, _class(s.of)), (module, s.of, s.learnt)
        assert s.generic() == [], (module, s.of)
