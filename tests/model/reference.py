"""A small pure-Python reference model of ONE leaseq queue (docs/semantics.md §1, §3, §4).

No leaseq imports: this is the specification written as code, so that a
model-based test can compare the real daemon's replies with it.

What it covers:

* jobs: id, payload, priority, state (delayed / ready / in_flight / dead),
  enqueued_at, visible_at, deliveries, the current lease (token, deadline,
  consumer), last_error, per-job MAXDELIVERIES;
* claim order: higher priority first, then jobs that were handed out before
  (expired lease, nack) before never-delivered ones, then ascending id;
* lazy expiry: a job whose lease deadline is <= now is claimable again, but
  its token keeps working (ack / nack / extend) until someone claims the job
  again; QACK / QNACK / QEXTEND skip stale tokens;
* ``deliveries`` counts distinct leases; a job that would be delivered for
  the MAXDELIVERIES+1-th time is dead-lettered instead (without a DEADLETTER
  queue it stays here in state ``dead`` for RETAIN-DEAD ms);
* QNACK with DELAY, with the queue's BACKOFF (jitter 0, so deterministic),
  with ERROR, with DEAD;
* the QINFO counters pushed / acked / nacked / lease_expired / dead_lettered
  / duplicates;
* a DEADLETTER queue (another ``RefQueue``): a job that dies leaves its queue
  and arrives there as a new ready job with provenance; QREDRIVE (a queue's
  own dead jobs back in place; a dead-letter queue's jobs back to their
  sources as new jobs);
* dedupe keys (QPUSH ... KEY k WHILE queued | active | exists);
* SESSION leases released when their connection ends (RESET or close);
* flow control (§3.7, §3.8): RATE and GROUP-RATE as lists of hand-out
  moments, CONCURRENCY, GROUP-CONCURRENCY (slots: in flight + waiting for a
  retry), QPAUSE of the queue or of a group, ``throttled``; groups take turns
  (each group a turn number; the best (head band, turn) gives its head and
  goes to the back; a group with no live job is forgotten);
* KEY ... REPLACE (§3.2) and AFTER / ONFAIL (§3.10): waiting jobs, released
  when their parents are acked, dead-lettered (parent-failed) when one dies;
* results (§3.4): QACK ... RESULT kept for RESULT-TTL, deaths and
  cancellations remembered as long, QRESULT's answer; QCANCEL (§3.11):
  state ``cancelled``, kept for RETAIN-DEAD, children dying with it.

Time is a number the test moves (the daemon's frozen DEBUG clock).  The
model folds eagerly (at every operation); the daemon folds lazily when
something looks, which is indistinguishable because every observation
(QCLAIM, QINFO, QGET, QPEEK, QLEN) folds first and ack / nack / extend treat
an expired-but-unclaimed lease exactly like a live one.
"""

from __future__ import annotations

import copy

from dataclasses import dataclass

DELAYED = "delayed"
READY = "ready"
IN_FLIGHT = "in_flight"
DEAD = "dead"
WAITING = "waiting"
CANCELLED = "cancelled"
LIVE = (READY, DELAYED, IN_FLIGHT, WAITING)
# dedupe scopes (docs/semantics.md §3.2): the states in which a job holding the key counts
SCOPES = {b"queued": (DELAYED, READY, WAITING), b"active": (DELAYED, READY, WAITING, IN_FLIGHT),
          b"exists": (DELAYED, READY, WAITING, IN_FLIGHT, DEAD, CANCELLED)}

LEASE_MIN, LEASE_MAX = 100, 86_400_000
DELAY_CAP = 86_400_000          # BACKOFF never waits longer than a day
ID_BLOCK = 1 << 16              # docs/operations.md "Job ids": a crash may skip up to this many ids


class _Pending:
    """Placeholder token between a claim and the moment the test tells the
    model which token the daemon handed out (compares unequal to any bytes)."""

    def __repr__(self) -> str:
        return "<pending token>"


@dataclass(eq=False)
class RefJob:
    id: int
    payload: bytes
    priority: int
    enqueued_at: int
    visible_at: int
    state: str
    max_deliveries: int = 0
    deliveries: int = 0
    token: object = None          # bytes of the job's latest lease while that lease has not ended
    deadline: int = 0
    consumer: bytes | None = None
    last_error: bytes | None = None
    requeued: bool = False        # handed out before: served before never-delivered jobs
    dead_reason: str | None = None
    retain_until: int = 0
    key: bytes | None = None
    origin: tuple | None = None   # (source queue, id there, deliveries, reason, parent) of a dead-lettered copy
    group: bytes = b""
    waiting_for: set | None = None   # AFTER: ids of this queue's parents still held
    onfail_run: bool = False
    after_delay: int = 0
    failed_parent: tuple | None = None   # the provenance of the parent whose death dooms it

    def order_key(self) -> tuple:
        return (-self.priority, 0 if self.requeued else 1, self.id)

    def band(self) -> int:
        return (9 - self.priority) * 2 + (0 if self.requeued else 1)

    def holds_slot(self) -> bool:
        """In flight, or waiting for a retry (nacked with a delay)."""
        return self.state == IN_FLIGHT or (self.state == DELAYED and self.requeued)


def clamp_lease(ms: int) -> int:
    return min(max(ms, LEASE_MIN), LEASE_MAX)


class RefQueue:
    def __init__(self, now: int, lease: int = 30_000, maxdeliveries: int = 0,
                 backoff: tuple = (1000, 2.0, 0), retain_dead: int = 604_800_000, name: bytes = b"q",
                 deadletter: "RefQueue | None" = None, result_ttl: int = 3_600_000) -> None:
        assert backoff[2] == 0, "the model needs BACKOFF jitter 0 to be deterministic"
        self.name = name
        self.deadletter = deadletter
        self.now = now
        self.lease = clamp_lease(lease)
        self.maxdeliveries = maxdeliveries
        self.backoff = backoff
        self.retain_dead = retain_dead
        self.result_ttl = result_ttl
        self.results: dict[int, tuple] = {}   # id -> (until, result or None, reason or None)
        self.jobs: dict[int, RefJob] = {}
        self.next_id: int | None = 1          # None: unknown (after a crash, until re-synced)
        self.max_id_seen = 0
        self.removed: list[int] = []          # ids once handed out that are gone now
        self.issued: set[bytes] = set()       # every token ever handed out
        self.pushed = self.acked = self.nacked = self.lease_expired = self.dead_lettered = self.duplicates = 0
        # flow control (§3.7, §3.8)
        self.rate = (0, 0)
        self.concurrency = 0
        self.paused = False
        self.group_concurrency = 0
        self.group_rate = (0, 0)
        self.paused_groups: set = set()
        self.handed: list[int] = []           # moments of hand-outs while RATE was set
        self.group_handed: dict = {}          # group -> moments, while GROUP-RATE was set
        self.turn: dict = {}                  # group -> turn, for every group with a live job
        self.next_turn = 0

    # -- time and lazy expiry -------------------------------------------------------

    def advance(self, ms: int) -> None:
        assert ms >= 0
        self.now += ms
        self.fold()
        if self.deadletter is not None:
            self.deadletter.advance(ms)

    def fold(self) -> None:
        now = self.now
        for job in list(self.jobs.values()):
            if job.state == DELAYED and job.visible_at <= now:
                job.state = READY
            elif job.state == IN_FLIGHT and job.deadline <= now:
                job.state = READY               # claimable again, the token still works
                job.requeued = True
                self.lease_expired += 1
            elif job.state in (DEAD, CANCELLED) and job.retain_until <= now:
                self._remove(job)
        for jid in [jid for jid, (until, _v, _r) in self.results.items() if until <= now]:
            del self.results[jid]
        self._tidy()

    def _remove(self, job: RefJob) -> None:
        del self.jobs[job.id]
        self.removed.append(job.id)
        self._tidy()

    # -- groups and flow control ------------------------------------------------------

    def _touch(self, group: bytes) -> None:
        if group not in self.turn:
            self.turn[group] = self.next_turn
            self.next_turn += 1

    def _tidy(self) -> None:
        """Groups with no live job leave the turns."""
        live = {j.group for j in self.jobs.values() if j.state in LIVE}
        for g in [g for g in self.turn if g not in live]:
            del self.turn[g]

    def _used(self, moments: list, span: int) -> int:
        return sum(1 for t in moments if t > self.now - span)

    def allowance(self) -> int | None:
        """The queue's own rules: how many it may hand out now (None: no rule)."""
        rules = self._rules()
        return min(n for _r, n in rules) if rules else None

    def _rules(self) -> list:
        rules = []
        if self.paused:
            rules.append(("pause", 0))
        if self.concurrency:
            in_flight = sum(1 for j in self.jobs.values() if j.state == IN_FLIGHT)
            rules.append(("concurrency", max(0, self.concurrency - in_flight)))
        n, span = self.rate
        if n:
            rules.append(("rate", max(0, n - self._used(self.handed, span))))
        return rules

    def _group_rules(self, g: bytes) -> list:
        rules = []
        if g in self.paused_groups:
            rules.append(("group-pause", 0))
        if self.group_concurrency:
            held = sum(1 for j in self.jobs.values() if j.group == g and j.holds_slot())
            rules.append(("group-concurrency", max(0, self.group_concurrency - held)))
        n, span = self.group_rate
        if n:
            rules.append(("group-rate", max(0, n - self._used(self.group_handed.get(g, []), span))))
        return rules

    def _next_job(self) -> RefJob | None:
        """The job a claim takes next: among the groups that may hand out one,
        the best (head band, turn); its head."""
        best = None
        for g in self.turn:
            ready = [j for j in self.jobs.values() if j.group == g and j.state == READY]
            if not ready or any(n == 0 for _r, n in self._group_rules(g)):
                continue
            head = min(ready, key=RefJob.order_key)
            rank = (head.band(), self.turn[g])
            if best is None or rank < best[0]:
                best = (rank, head)
        return None if best is None else best[1]

    def throttled(self) -> int:
        self.fold()
        free = 0
        for g in {j.group for j in self.jobs.values() if j.state == READY}:
            ready = sum(1 for j in self.jobs.values() if j.group == g and j.state == READY)
            rules = self._group_rules(g)
            free += min([ready] + [n for _r, n in rules])
        rules = self._rules()
        held = sum(1 for j in self.jobs.values() if j.state == READY) - free
        if rules:
            held += max(0, free - min(n for _r, n in rules))
        return held

    def group_count(self) -> int:
        return len({j.group for j in self.jobs.values() if j.state in LIVE})

    def set_rules(self, rate=None, concurrency=None, group_concurrency=None, group_rate=None) -> None:
        if rate is not None:
            if rate != self.rate:
                self.handed = []               # a RATE set or changed starts with an empty window
            self.rate = rate
        if concurrency is not None:
            self.concurrency = concurrency
        if group_concurrency is not None:
            self.group_concurrency = group_concurrency
        if group_rate is not None:
            if group_rate != self.group_rate:
                self.group_handed = {}         # and so does a GROUP-RATE
            self.group_rate = group_rate

    def forget_windows(self) -> None:
        """A restart's rate windows start empty once the test has let them run out."""
        self.handed = []
        self.group_handed = {}

    # -- views ------------------------------------------------------------------------

    def ready_order(self) -> list[RefJob]:
        self.fold()
        return sorted((j for j in self.jobs.values() if j.state == READY), key=RefJob.order_key)

    def counts(self) -> dict:
        self.fold()
        c = {DELAYED: 0, READY: 0, IN_FLIGHT: 0, DEAD: 0, WAITING: 0, CANCELLED: 0}
        for j in self.jobs.values():
            c[j.state] += 1
        return c

    def oldest_ready_age(self) -> int:
        ready = [j for j in self.jobs.values() if j.state == READY]
        if not ready:
            return 0
        return max(0, self.now - min(ready, key=lambda j: j.id).enqueued_at)

    def upcoming(self) -> list[int]:
        """The moments at which a job changes state by time alone."""
        self.fold()
        out = []
        for j in self.jobs.values():
            if j.state == IN_FLIGHT:
                out.append(j.deadline)
            elif j.state == DELAYED:
                out.append(j.visible_at)
            elif j.state in (DEAD, CANCELLED):
                out.append(j.retain_until)
        out += [until for until, _v, _r in self.results.values()]
        return out

    def job_for_token(self, token: bytes) -> RefJob | None:
        for job in self.jobs.values():
            if job.token == token:
                return job
        return None

    def live_tokens(self) -> list[bytes]:
        return [j.token for j in self.jobs.values() if isinstance(j.token, bytes)]

    # -- producing --------------------------------------------------------------------

    def push(self, ids: list[int], payloads: list[bytes], priority: int = 5, delay: int | None = None,
             at: int | None = None, max_deliveries: int = 0, group: bytes = b"", after: list | None = None,
             onfail_run: bool = False) -> list[RefJob]:
        """New jobs with the ids the daemon gave them (checked by ``check_new_ids``);
        ``after``: ids of parents in this queue (AFTER)."""
        self.check_new_ids(ids, len(payloads))
        self.fold()
        visible_at = self._visible_at(delay, at)
        pending, failed = set(), None
        for pid in after or ():
            parent = self.jobs.get(pid)
            if parent is None:
                continue                             # no longer held: done
            if parent.state in (DEAD, CANCELLED):
                if not onfail_run:
                    pending.add(pid)
                    failed = failed or parent
                continue
            pending.add(pid)
        new = []
        for jid, payload in zip(ids, payloads):
            state = WAITING if pending else DELAYED if visible_at > self.now else READY
            job = RefJob(jid, payload, priority, self.now, visible_at, state, max_deliveries, group=group,
                         waiting_for=set(pending) if pending else None, onfail_run=onfail_run,
                         after_delay=delay or 0)
            self.jobs[jid] = job
            new.append(job)
            self._touch(group)
        self.pushed += len(ids)
        self.max_id_seen = ids[-1]
        self.next_id = ids[-1] + 1
        if failed is not None:
            for job in new:
                self._die_for(job, failed)
        return new

    def _visible_at(self, delay: int | None, at: int | None) -> int:
        if at is not None:
            return max(at, self.now)
        if delay:
            return self.now + delay
        return self.now

    def push_keyed(self, reply: int, payload: bytes, priority: int, key: bytes, scope: bytes,
                   replace: bool = False, **kw) -> bool:
        """QPUSH ... KEY ``key`` WHILE ``scope`` [REPLACE]: the newest job holding
        the key in the scope answers (nothing is created; with REPLACE a ready
        or delayed holder takes the payload, priority and, with DELAY/AT, the
        ready time), else a new job holds it.  True when a holder was replaced."""
        self.fold()
        holders = [j for j in self.jobs.values() if j.key == key and j.state in SCOPES[scope]]
        if holders:
            newest = max(holders, key=lambda j: j.id)
            assert reply == newest.id, f"KEY {key!r} WHILE {scope!r}: daemon {reply}, model the holder {newest.id}"
            self.duplicates += 1
            if replace and newest.state in (READY, DELAYED):
                newest.payload = payload
                newest.priority = priority
                if kw.get("delay") is not None or kw.get("at") is not None:
                    visible_at = self._visible_at(kw.get("delay"), kw.get("at"))
                    newest.visible_at = visible_at
                    newest.state = DELAYED if visible_at > self.now else READY
                return True
            return False
        self.push([reply], [payload], priority, **kw)
        self.jobs[reply].key = key
        return False

    def receive(self, job: RefJob, source: bytes, reason: str) -> RefJob:
        """A dead job of another queue arrives as a new ready job (docs/semantics.md
        §1.8 "Where the job goes"): the next id here, deliveries 0, the same payload,
        priority and last_error, enqueued now, with provenance; no key, no limits."""
        jid = self.take_id()
        origin = _provenance(job, source, reason)
        copy = RefJob(jid, job.payload, job.priority, self.now, self.now, READY, last_error=job.last_error,
                      origin=origin, group=job.group)
        self.jobs[jid] = copy
        self._touch(job.group)
        return copy

    def take_id(self) -> int:
        """The id of a job the daemon creates without telling it (a dead-letter
        copy, a job redriven back to its source)."""
        assert self.next_id is not None, "the next id is known again right after a restart"
        self.max_id_seen = jid = self.next_id
        self.next_id += 1
        return jid

    def check_new_ids(self, ids: list[int], n: int) -> None:
        """Ids of one push: n consecutive ids, above every id so far, and exactly
        the next id when it is known (it is not only right after a crash)."""
        assert len(ids) == n, f"{n} jobs pushed but {len(ids)} ids returned: {ids}"
        assert ids == list(range(ids[0], ids[0] + n)), f"ids of one push are not consecutive: {ids}"
        assert ids[0] > self.max_id_seen, f"id {ids[0]} not above every earlier id ({self.max_id_seen})"
        if self.next_id is not None:
            assert ids[0] == self.next_id, f"expected id {self.next_id}, daemon gave {ids[0]}"

    # -- claiming ---------------------------------------------------------------------

    def death_reason(self, job: RefJob) -> str | None:
        limit = job.max_deliveries or self.maxdeliveries
        if limit and job.deliveries >= limit:
            return "max-deliveries"
        return None

    def claim(self, count: int, lease_ms: int | None, consumer: bytes) -> list[RefJob]:
        """Lease up to ``count`` jobs, as the queue's rules allow, taking turns
        among the groups.  A job that would be delivered one time too many is
        dead-lettered on the way and the next one taken: the claim reads the
        first ``count`` jobs it could deliver, passing over those that must
        die (they take no turn); if it passed any, they die, in the order it
        reached them, and it reads again, jobs their deaths released
        included (docs/semantics.md §1.8).  The jobs get pending tokens: call
        ``bind_tokens`` with the daemon's."""
        lease_ms = self.lease if lease_ms is None else clamp_lease(lease_ms)
        deadline = self.now + lease_ms
        while True:
            self.fold()
            dying = self._passed_over(count, deadline, consumer)
            if not dying:
                break
            for job, reason in dying:
                self._bury(self.jobs[job.id], reason)
        return self._take(count, deadline, consumer)

    def _passed_over(self, count: int, deadline: int, consumer: bytes) -> list[tuple[RefJob, str]]:
        """The jobs a claim of ``count`` would pass over because they must
        die, in the order it reaches them: the claim run on a copy of the
        queue (the jobs returned are the copy's: their ids name them)."""
        shadow = copy.deepcopy(self)
        dying: list = []
        shadow._take(count, deadline, consumer, dying)
        return dying

    def _take(self, count: int, deadline: int, consumer: bytes, dying: list | None = None) -> list[RefJob]:
        """Lease the first ``count`` jobs in claim order; one that must die is
        passed over into ``dying`` (or, with None, must not be there)."""
        allowed = self.allowance()
        if allowed is not None:
            count = min(count, allowed)
        taken: list[RefJob] = []
        while len(taken) < count:
            job = self._next_job()
            if job is None:
                break
            reason = self.death_reason(job)
            if reason is not None:
                assert dying is not None, "a job that must die was left for the claim"
                dying.append((job, reason))
                job.state = "passed over"             # (in the copy only: no longer ready)
                continue
            job.state = IN_FLIGHT
            job.token = _Pending()             # the old token (if any) is stale from now on
            job.deadline = deadline
            job.consumer = consumer
            job.deliveries += 1
            self.turn[job.group] = self.next_turn
            self.next_turn += 1
            if self.rate[0]:
                self.handed.append(self.now)
            if self.group_rate[0]:
                self.group_handed.setdefault(job.group, []).append(self.now)
            taken.append(job)
        return taken

    def bind_tokens(self, jobs: list[RefJob], tokens: list[bytes]) -> None:
        for job, token in zip(jobs, tokens):
            assert isinstance(job.token, _Pending)
            assert token not in self.issued, f"token {token!r} handed out twice"
            self.issued.add(token)
            job.token = token

    # -- completing -------------------------------------------------------------------

    def _live(self, tokens: list[bytes]) -> list[RefJob]:
        jobs, seen = [], set()
        for t in tokens:
            job = self.job_for_token(t)
            if job is not None and job.id not in seen:
                seen.add(job.id)
                jobs.append(job)
        return jobs

    def ack(self, tokens: list[bytes], result: bytes | None = None) -> int:
        """QACK; ``result`` (QACK ... RESULT, one token) kept for RESULT-TTL."""
        self.fold()
        jobs = self._live(tokens)
        for job in jobs:
            self._remove(job)
            self.acked += 1
            self._parent_done(job.id)
            if result is not None and self.result_ttl:
                self.results[job.id] = (self.now + self.result_ttl, result, None)
        return len(jobs)

    def cancel(self, ids: list[int]) -> int:
        """QCANCEL: live jobs end now in state cancelled (kept for
        RETAIN-DEAD); their waiting children die (parent-failed) unless
        ONFAIL run, as for a death."""
        self.fold()
        done = []
        for jid in ids:
            job = self.jobs.get(jid)
            if job is not None and job.state in LIVE and job not in done:
                done.append(job)
        for job in done:
            job.state = CANCELLED
            job.token = None
            job.deadline = 0
            job.retain_until = self.now + self.retain_dead
            self._remember(job, "cancelled")
        for job in done:
            self._doom_children(job)
        self._tidy()
        return len(done)

    def result(self, jid: int):
        """QRESULT's answer: the result (bytes), None while unfinished, or
        the error text ("DEAD reason", "NOJOB ...")."""
        self.fold()
        job = self.jobs.get(jid)
        if job is not None and job.state in LIVE:
            return None
        kept = self.results.get(jid)
        if kept is not None:
            _until, value, reason = kept
            return value if value is not None else f"DEAD {reason}"
        if job is not None:
            return f"DEAD {job.dead_reason if job.state == DEAD else 'cancelled'}"
        return f"NOJOB job {jid} of queue '{self.name.decode()}' is unknown or its result expired"

    def _remember(self, job: RefJob, reason: str) -> None:
        if self.result_ttl:
            self.results[job.id] = (self.now + self.result_ttl, None, reason)

    def _children(self, parent_id: int) -> list[RefJob]:
        return [j for j in sorted(self.jobs.values(), key=lambda j: j.id)
                if j.state == WAITING and j.waiting_for and parent_id in j.waiting_for]

    def _parent_done(self, parent_id: int) -> None:
        for child in self._children(parent_id):
            self._drop_parent(child, parent_id)

    def _drop_parent(self, child: RefJob, parent_id: int) -> None:
        child.waiting_for.discard(parent_id)
        if not child.waiting_for and child.failed_parent is None:
            visible_at = self.now + child.after_delay if child.after_delay else max(child.visible_at, self.now)
            child.visible_at = visible_at
            child.state = DELAYED if visible_at > self.now else READY

    def _die_for(self, child: RefJob, parent: RefJob) -> None:
        """A child whose parent died (or was dead when it was pushed)."""
        child.failed_parent = (self.name, parent.id, parent.deliveries, "parent-failed")
        self._bury(child, "parent-failed")

    def backoff_delay(self, job: RefJob) -> int:
        base, exponent, _jitter = self.backoff
        return int(min(base * (max(job.deliveries, 1) ** exponent), DELAY_CAP))

    def _release(self, job: RefJob, visible_at: int, error: bytes | None) -> None:
        job.token = None
        job.deadline = 0
        job.requeued = True
        if visible_at > self.now:
            job.state = DELAYED
            job.visible_at = visible_at
        else:
            job.state = READY                  # visible_at keeps its old value
        if error is not None:
            job.last_error = error
        self.nacked += 1

    def _bury(self, job: RefJob, reason: str) -> None:
        """Dead-letter ``job``; its waiting children die too (parent-failed),
        level by level, or count it as done with ONFAIL run."""
        self._bury_one(job, reason)
        self._doom_children(job)

    def _doom_children(self, job: RefJob) -> None:
        """``job`` died or was cancelled: its waiting children die too
        (parent-failed), level by level, or count it as done with ONFAIL run."""
        level = [job]
        while level:
            doomed = []
            for parent in level:
                for child in self._children(parent.id):
                    if child.onfail_run:
                        self._drop_parent(child, parent.id)
                    elif child.failed_parent is None:
                        child.failed_parent = (self.name, parent.id, parent.deliveries, "parent-failed")
                        doomed.append(child)
            for child in doomed:
                self._bury_one(child, "parent-failed")
            level = doomed

    def _bury_one(self, job: RefJob, reason: str) -> None:
        job.token = None
        job.deadline = 0
        self.dead_lettered += 1
        self._remember(job, reason)
        if self.deadletter is not None:
            self._remove(job)
            self.deadletter.receive(job, self.name, reason)
            return
        job.state = DEAD
        job.dead_reason = reason
        job.retain_until = self.now + self.retain_dead
        if job.failed_parent is not None:
            job.origin = _provenance(job, self.name, reason)
        self._tidy()

    def redrive(self, sources: dict) -> int:
        """QREDRIVE (docs/semantics.md §3.5): this queue's dead jobs back to ready
        in place (retention order), then, on a dead-letter queue, its ready jobs
        with provenance back to their sources (``sources``: name -> RefQueue) as
        new jobs, in claim order.  Returns how many moved."""
        self.fold()
        dead = sorted((j for j in self.jobs.values() if j.state == DEAD), key=lambda j: (j.retain_until, j.id))
        for job in dead:
            job.state = READY
            job.deliveries = 0
            job.dead_reason = None
            job.retain_until = 0
            job.enqueued_at = self.now
            job.requeued = True
            self._touch(job.group)
        # provenance naming this queue itself (a child dead in place with its parent here) stays
        back = [j for j in self.ready_order() if j.origin is not None and j.origin[0] != self.name]
        for job in back:
            self._remove(job)
            source = sources[job.origin[0]]
            jid = source.take_id()
            source.jobs[jid] = RefJob(jid, job.payload, job.priority, self.now, self.now, READY,
                                      last_error=job.last_error, requeued=True, group=job.group)
            source._touch(job.group)
        return len(dead) + len(back)

    def release_session(self, tokens: list[bytes]) -> None:
        """The connection that holds SESSION leases ``tokens`` ended: the jobs
        still under them go back to ready at once, without a nack delay, a
        deliveries bump or a ``nacked`` count; their tokens are stale."""
        self.fold()
        for job in self._live(tokens):
            job.token = None
            job.deadline = 0
            job.state = READY
            job.requeued = True

    def nack(self, tokens: list[bytes], delay: int | None = None, error: bytes | None = None,
             dead: bool = False) -> int:
        """``delay`` None: the queue's BACKOFF per job; ``dead``: dead-letter now."""
        assert not (dead and delay is not None)
        self.fold()
        jobs = self._live(tokens)
        for job in jobs:
            if dead:
                self._release(job, self.now, error)
                self._bury(job, "nack")
            elif delay is not None:
                self._release(job, self.now + delay, error)
            else:
                self._release(job, self.now + self.backoff_delay(job), error)
        return len(jobs)

    def extend(self, tokens: list[bytes], lease_ms: int | None = None) -> list[int | None]:
        """deadline = now + LEASE for every live token (an expired lease not yet
        claimed again goes back to in_flight, deliveries unchanged)."""
        self.fold()
        lease_ms = self.lease if lease_ms is None else clamp_lease(lease_ms)
        deadline = self.now + lease_ms
        for job in self._live(tokens):
            job.state = IN_FLIGHT
            job.deadline = deadline
        return [deadline if self.job_for_token(t) is not None else None for t in tokens]

    # -- restarts ---------------------------------------------------------------------

    def restarted(self, crashed: bool) -> None:
        """Every replied change survives (fsync queue, lease-durability fsync).
        ``lease_expired`` survives too: the daemon logs each lease it finds
        run out (an EXPIRE record, written before the reply of the command
        that looked), and one it had not noticed yet is counted when it next
        looks, as here.  After a crash the next id may jump ahead (ids are
        reserved in blocks): unknown until ``resync_next_id``."""
        self.fold()
        if crashed:
            self.next_id = None

    def resync_duplicates(self, duplicates: int) -> None:
        """After a restart: duplicate pushes are not logged, so the counter is
        what the snapshot the start loaded held (0 without one), at most what
        it was before."""
        assert 0 <= duplicates <= self.duplicates, \
            f"duplicates {duplicates} after a restart: expected 0..{self.duplicates}"
        self.duplicates = duplicates

    def resync_next_id(self, next_id: int) -> None:
        floor = self.max_id_seen + 1
        assert floor <= next_id <= floor + ID_BLOCK, \
            f"next id {next_id} after a crash: expected {floor}..{floor + ID_BLOCK}"
        self.next_id = next_id


def _provenance(job: RefJob, source, reason: str) -> tuple:
    """A dead job's provenance: its own queue and id, and for one that died
    with a parent it waited for (parent-failed), that parent's queue and id
    (docs/semantics.md §1.8)."""
    parent = job.failed_parent
    return (source, job.id, job.deliveries, reason, None if parent is None else (parent[0], parent[1]))
