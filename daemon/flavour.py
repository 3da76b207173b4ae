"""Which flavour of the daemon runs (INFO's ``leaseq_flavour``, ``leaseq
--version``; docs/performance.md, "One source, two flavours").

"compiled" when every compiled module of the daemon (setup.py's COMPILED
list, less the benchmarks' instruments; a test holds the two lists
together) was built and LEASEQ_PURE is not 1; "pure" when none is;
otherwise it names those in use.  ``storage.flavour`` is how a module is
loaded in either; this module only reckons what loaded."""

from __future__ import annotations

from leaseq.commands import args, claims, jobs, parties, queues
from leaseq.storage import bands, indexes, journal, logbuffer, plain, queue, store
from leaseq.storage.flavour import compiled_twin, is_compiled

from . import blocking, committer, connection, dispatch, faults, logthread, metrics, outbox, resp, timeouts, waiter

# compiled from their own .py (setup.py's ONE_SOURCE)
ONE_SOURCE = (bands, logbuffer, indexes, queue, store, outbox, timeouts, connection, committer, dispatch, blocking,
              waiter, faults, claims, plain, journal, parties, args, queues, jobs, metrics)
DAEMON_COMPILED = tuple(m.__name__.rpartition(".")[2] for m in ONE_SOURCE) + (
    "_resp", "_parser", "_job", "_jobtable", "_index", "_clock", "_logthread")
COMPILED = ([m.__name__.rpartition(".")[2] for m in ONE_SOURCE if is_compiled(m)] + resp.COMPILED
            + (["_logthread"] if logthread.COMPILED else []))
FLAVOUR = ("compiled" if len(COMPILED) == len(DAEMON_COMPILED) else "pure" if not COMPILED
           else f"partly compiled ({', '.join(COMPILED)})")
# whether the compiled modules were built from a profile (bin/build-from-profile; docs/performance.md)
_clock = compiled_twin("leaseq.storage._clock")     # (its build says it: bin/build-from-profile defines a macro)
PROFILE_GUIDED = _clock is not None and _clock.PROFILE_GUIDED
