"""The check of the crash test (test_crash.py): what the clients saw and what
each audit found, held against the rules of docs/semantics.md §4 the crash
test is about, one checker per rule, run in sequence by ``analyze``.

Each checker reads ``Seen`` (what the clients saw, indexed once) and writes to
``Verdict`` (violations per rule, the first details, the figures of the
summary line).  Its docstring names the rule and says exactly what it
accepts."""

from __future__ import annotations

from collections import defaultdict

RULES = ("rule1", "rule2", "rule3", "rule5", "rule8", "rule9", "other")
MAX_DETAILS = 40


class Verdict:
    """Violations per rule (each counted once per key), the first
    ``MAX_DETAILS`` sentences saying what was wrong, and the figures the
    summary line prints (``stats``)."""

    def __init__(self) -> None:
        self.violations = {rule: set() for rule in RULES}
        self.details: list[str] = []
        self.stats = defaultdict(int)

    def bad(self, rule: str, key, text: str) -> None:
        if key not in self.violations[rule] and len(self.details) < MAX_DETAILS:
            self.details.append(f"{rule}: {text}")
        self.violations[rule].add(key)

    def counts(self) -> dict:
        return {rule: len(keys) for rule, keys in self.violations.items()}


class Seen:
    """What the clients saw (``world``), indexed once for every checker.

    ``payload_of`` (job -> payload) starts with the jobs of push replies; the
    payload checks add the jobs of pushes whose reply was lost as claims and
    audits reveal them."""

    def __init__(self, world, exact_leases: bool) -> None:
        self.world = world
        self.exact_leases = exact_leases
        self.audits = world.audits
        self.runs = sorted(world.audits)
        self.final = world.final_run
        self.leases_of = defaultdict(list)           # job -> [Lease] in claim order
        self.payload_of = {}                         # job -> payload pushed
        self.push_of_payload = {}                    # payload -> Push
        for p in world.pushes:
            for pl in p.payloads:
                self.push_of_payload[pl] = p
            if p.ids is not None:
                for i, pl in zip(p.ids, p.payloads):
                    self.payload_of[(p.q, i)] = pl
        self.unknown_consumers = defaultdict(set)    # run -> consumers of QCLAIMs with lost replies
        self.unknown_claims = defaultdict(list)      # run -> QCLAIMs with lost replies
        self.fence = defaultdict(lambda: float("-inf"))  # run -> send time of the last fsync-acknowledged write
        for p in world.pushes:
            if p.ids is not None:
                self.fence[p.inc] = max(self.fence[p.inc], p.t_send)
        for o in world.ops:
            if o.kind == "ack" and o.success:
                self.fence[o.inc] = max(self.fence[o.inc], o.t_send)
        for c in world.claims:
            if c.unknown:
                self.unknown_consumers[c.inc].add(c.consumer.encode())
                self.unknown_claims[c.inc].append(c)
            for e in c.entries:
                self.leases_of[e.job].append(e)
        for ls in self.leases_of.values():
            ls.sort(key=lambda e: e.order)

    def aud(self, run, job):
        """The QGET map of ``job`` at the audit that opened ``run``, or None."""
        return self.audits.get(run, {}).get(job)


# -- plain integrity ------------------------------------------------------------------------------

def check_push_replies(seen: Seen, v: Verdict) -> None:
    """Integrity: a push reply names one distinct id per payload pushed."""
    for p in seen.world.pushes:
        if p.ids is not None and (len(p.ids) != len(p.payloads) or len(set(p.ids)) != len(p.ids)):
            v.bad("other", ("pushreply", id(p)), f"push reply {p.ids} for {len(p.payloads)} payloads")


def _payload_seen(seen: Seen, v: Verdict, job, payload, where: str) -> None:
    """``job`` was seen carrying ``payload`` (``where``: how, for the
    sentence): it must be the payload pushed for it; the job of a push whose
    reply was lost is learnt here."""
    want = seen.payload_of.get(job)
    if want is None:
        p = seen.push_of_payload.get(payload)
        if p is None:
            v.bad("other", ("phantom", job), f"{where}job {job} with a payload nobody pushed")
        elif p.ids is not None or p.q != job[0]:
            v.bad("other", ("dup", job), f"{where}job {job} carries payload {payload!r} of another id")
        else:
            seen.payload_of[job] = payload
    elif want != payload:
        v.bad("other", ("payload", job), f"{where}job {job} has payload {payload!r}, pushed {want!r}")


def check_claimed_payloads(seen: Seen, v: Verdict) -> None:
    """Integrity: every claimed job carries the payload pushed for it (no
    phantom job, no job with another job's payload)."""
    for c in seen.world.claims:
        for e in c.entries:
            _payload_seen(seen, v, e.job, e.payload, "claimed ")


def check_audited_payloads(seen: Seen, v: Verdict) -> None:
    """Integrity: every job an audit finds carries the payload pushed for it."""
    for run in seen.runs:
        for job, g in seen.audits[run].items():
            if g is not None:
                _payload_seen(seen, v, job, g["payload"], f"audit {run}: ")


def check_qinfo_matches_qget(seen: Seen, v: Verdict) -> None:
    """Integrity: at each audit, QINFO's live counters (ready + delayed +
    in_flight + dead) of a queue count the jobs QGET finds in it."""
    for run in seen.runs:
        live = defaultdict(int)
        for job, g in seen.audits[run].items():
            if g is not None:
                live[job[0]] += 1
        for q, info in seen.world.audit_info[run].items():
            counted = info["ready"] + info["delayed"] + info["in_flight"] + info["dead"]
            if counted != live[q]:
                v.bad("other", ("count", run, q),
                      f"audit {run}: QINFO {q} counts {counted} live jobs, QGET finds {live[q]}")


def check_one_job_per_payload(seen: Seen, v: Verdict) -> None:
    """Integrity: no payload (each pushed once) exists as two jobs."""
    jobs_of = defaultdict(set)
    for job, pl in seen.payload_of.items():
        jobs_of[pl].add(job)
    for pl, jobs in jobs_of.items():
        if len(jobs) > 1:
            v.bad("other", ("dup", pl), f"payload {pl!r} exists as several jobs {sorted(jobs)}")


def check_lost_pushes_all_or_none(seen: Seen, v: Verdict) -> None:
    """Integrity: a QPUSHMANY whose reply was lost applied all its jobs or
    none (counts the applied ones in ``unknown pushes applied``)."""
    found_payloads = set(seen.payload_of.values())
    for p in seen.world.pushes:
        if p.unknown:
            found = sum(1 for pl in p.payloads if pl in found_payloads)
            v.stats["unknown pushes applied"] += bool(found)
            if found not in (0, len(p.payloads)):
                v.bad("other", ("atomic", id(p)),
                      f"QPUSHMANY with a lost reply applied {found} of {len(p.payloads)} jobs")


def check_no_error_replies(seen: Seen, v: Verdict) -> None:
    """Integrity: no command got an error reply, and the SIGTERM stop exited 0."""
    world = seen.world
    if world.errors:
        for e in world.errors[:5]:
            v.bad("other", ("error", e), f"error reply: {e}")
        v.violations["other"].update(("error", i) for i in range(len(world.errors)))
    if world.stop_rc != 0:
        v.bad("other", ("stop",), f"SIGTERM stop exited with {world.stop_rc}")


# -- the rules of docs/semantics.md §4 ------------------------------------------------------------

def check_rule1_pushed_jobs_survive(seen: Seen, v: Verdict) -> None:
    """§4.1 A pushed job survives a crash: an id returned by QPUSH/QPUSHMANY
    exists at every later audit, or was acked.  An ack whose reply was lost may
    have removed it, so it excuses absence too."""
    acked_by = defaultdict(list)              # job -> [Op] acks that succeeded or have unknown outcome
    for o in seen.world.ops:
        if o.kind == "ack" and (o.success or o.unknown):
            acked_by[o.lease.job].append(o)
    for p in seen.world.pushes:
        for i in p.ids or ():
            job = (p.q, i)
            for run in seen.runs:
                if run > p.inc and seen.aud(run, job) is None and not any(o.inc < run for o in acked_by[job]):
                    v.bad("rule1", job, f"job {job} (pushed in run {p.inc}) missing at audit {run}, never acked")


def check_rule2_acked_never_returns(seen: Seen, v: Verdict) -> None:
    """§4.2 An acked job never comes back: after QACK replied >= 1, the job is
    gone at every later audit and no lease of it is granted after that ack (any
    lease later in claim order than the acked token, in the ack's run or later,
    came after the ack: before it, the acked token would have been stale and
    the ack would have replied 0).  Counts ``acked jobs``."""
    acks = [o for o in seen.world.ops if o.kind == "ack" and o.success]
    for o in acks:
        job = o.lease.job
        for run in seen.runs:
            if run > o.inc and seen.aud(run, job) is not None:
                v.bad("rule2", job, f"job {job} acked in run {o.inc} is back at audit {run}: {seen.aud(run, job)}")
        for e in seen.leases_of[job]:
            if e is not o.lease and (e.inc > o.inc or (e.inc == o.inc and e.order > o.lease.order)):
                v.bad("rule2", job, f"job {job} acked (token {o.lease.token!r}, run {o.inc}) was leased "
                                    f"again: token {e.token!r} run {e.inc} deliveries {e.deliveries}")
    v.stats["acked jobs"] = len({o.lease.job for o in acks})


def deadline_of(a, ops, base=None) -> float:
    """Lease ``a``'s deadline (a lower bound) after ``ops``, starting from
    ``base`` (default: the claim's deadline).  QEXTEND *sets* the deadline (now
    + LEASE, it does not add); a QEXTEND with a lost reply was not run before it
    was sent, so it set at least send time + LEASE: the bound is the lower of
    the two."""
    end = a.deadline if base is None else base
    lowest_unknown = float("inf")
    for o in sorted((o for o in ops if o.kind == "extend"), key=lambda o: o.t_send):
        if o.success:
            end = o.result
            lowest_unknown = float("inf")
        elif o.unknown:
            lowest_unknown = min(lowest_unknown, int(o.t_send) + o.lease_ms)
    return min(end, lowest_unknown)


def _lost_lease_excuses(seen: Seen, job, a, b) -> bool:
    """With lease-durability async, claim and extend records may be lost in a
    crash (docs/semantics.md §5.3): when B's run is later than A's, A's lease
    is judged by what recovery restored, read from the audit that opened B's
    run (A's claim lost if deliveries are below A's; else the audited
    deadline, or a later QEXTEND of A in B's run)."""
    g = seen.aud(b.inc, job)
    if g is not None and g["deliveries"] < a.deliveries:
        return True                               # A's claim was not recovered
    # recovery may only restore a deadline A really had (a lost QEXTEND)
    had = {a.deadline} | {o.result for o in a.ops if o.kind == "extend" and o.success}
    if g is not None and g.get("consumer") == a.consumer.encode() and (
            g.get("deadline") in had or any(o.unknown for o in a.ops if o.kind == "extend")):
        later = [o for o in a.ops if o.kind == "extend" and o.inc == b.inc]
        return b.start >= deadline_of(a, later, base=g.get("deadline", 0))
    return False


def check_rule3_one_lease_holder(seen: Seen, v: Verdict) -> None:
    """§4.3 One lease holder at a time: for two leases A before B (claim
    order) of one job, B's claim (its daemon time: deadline - LEASE) must not
    be before A's deadline as it stood (``deadline_of``): the result of A's
    last successful QEXTEND, or the claim's deadline; every successful QEXTEND
    of A came before B's claim (after it, A's token was stale).  No overlap is
    a violation if A's lease was ended first by a successful QNACK (or QACK:
    then rule 2 applies), or maybe by one whose reply was lost: sent in an
    earlier run, or before B's claim in the same run (a kill right after B's
    claim resets the connection before the reply is read).  With
    lease-durability async, overlaps that lost lease records explain
    (``_lost_lease_excuses``) are counted in ``overlaps from lost lease
    records``.  Also: no token is handed out twice."""
    for job, ls in seen.leases_of.items():
        for i, a in enumerate(ls):
            a_end = deadline_of(a, a.ops)
            ended = any(o.success for o in a.ops if o.kind in ("ack", "nack"))
            maybe_ended = [o for o in a.ops if o.kind in ("ack", "nack") and o.unknown]
            for b in ls[i + 1:]:
                if b.token == a.token:
                    v.bad("other", ("token", b.token), f"token {b.token!r} handed out twice")
                    continue
                if b.start >= a_end or ended or any(o.inc < b.inc or o.t_send <= b.start for o in maybe_ended):
                    continue
                if not seen.exact_leases and b.inc > a.inc and _lost_lease_excuses(seen, job, a, b):
                    v.stats["overlaps from lost lease records"] += 1
                    continue
                v.bad("rule3", job, f"job {job}: token {b.token!r} (run {b.inc}) claimed at {b.start} "
                                    f"while token {a.token!r} (run {a.inc}) was leased until {a_end}")


def check_rule5_deliveries_count_tokens(seen: Seen, v: Verdict) -> None:
    """§4.5 Deliveries count distinct tokens: deliveries == distinct tokens
    handed out.

    (a) Within one run the daemon's memory is authoritative, so the claim
        replies of a job in run k carry deliveries D+1, D+2, ... D+m exactly,
        where D is the job's deliveries at the audit that opened run k (0 if it
        was pushed during run k) and m the number of its tokens seen in run k.
    (b) At the audit after run k, a job's deliveries D' counts the tokens of
        run k that recovery replayed, plus g = 1 if the job is leased to the
        consumer of a QCLAIM of run k whose reply was lost (a token handed out
        that nobody saw).  With lease-durability fsync, and after the clean
        stop, nothing may be lost: D' == D + m + g.  With async lease records
        (docs/semantics.md §5.3, best effort) the lost claims are a suffix of
        the log, so D + m_durable <= D' <= D + m + g, where m_durable counts
        claims whose reply arrived before a later fsync-acked write of the same
        run was sent (that fsync covered them); D' never exceeds what was
        handed out.  Together: deliveries never counts a token that was not
        handed out, never loses an fsynced one, and is exact without crashes."""
    by_run = defaultdict(lambda: defaultdict(list))
    for job, ls in seen.leases_of.items():
        for e in ls:
            by_run[job][e.inc].append(e)
    jobs_seen = set(seen.leases_of)
    for run in seen.runs:
        jobs_seen.update(j for j, g in seen.audits[run].items() if g is not None)
    for job in jobs_seen:
        for run in sorted(set(by_run[job]) | {r - 1 for r in seen.runs if r >= 1}):
            start = seen.aud(run, job)
            d0 = start["deliveries"] if start is not None else 0
            mine = by_run[job].get(run, [])
            got = sorted(e.deliveries for e in mine)
            want = list(range(d0 + 1, d0 + 1 + len(got)))
            if got != want:
                v.bad("rule5", job, f"job {job} run {run}: claim replies carry deliveries {got}, "
                                    f"expected {want} (audit at run start: {d0})")
            end = seen.aud(run + 1, job)
            if end is None:
                continue
            g = 1 if end.get("consumer") in seen.unknown_consumers[run] else 0
            v.stats["grants seen only by audit"] += g
            m = len(mine)
            # QGET names the consumer of the job's last lease; should it ever stop
            # doing so, a lost-reply QCLAIM on this queue in this run may account for one
            maybe = int("consumer" not in end and any(c.q == job[0] for c in seen.unknown_claims[run]))
            if seen.exact_leases or run + 1 == seen.final or g:
                ok = d0 + m + g <= end["deliveries"] <= d0 + m + g + maybe
                expect = f"{d0 + m + g}"
            else:
                durable = sum(1 for e in mine if e.t_recv < seen.fence[run])
                ok = d0 + durable <= end["deliveries"] <= d0 + m + maybe
                expect = f"{d0 + durable}..{d0 + m}"
                v.stats["claims lost in crashes"] += d0 + m - end["deliveries"] if ok else 0
            if not ok:
                v.bad("rule5", job, f"job {job}: deliveries {end['deliveries']} at audit {run + 1}, expected "
                                    f"{expect} (run {run}: {m} tokens seen, {g} unseen grant, start {d0})")


def check_rule9_leases_survive(seen: Seen, v: Verdict) -> None:
    """§4.9 Live counters survive a restart, job by job: the live state
    recovery rebuilt is the state before the stop.  Where nothing may be lost
    (lease-durability fsync, or a clean stop), a job whose deliveries at an
    audit match its last known lease L must show L: released (no lease) if a
    QNACK of L succeeded, else still L's consumer with the deadline of L's last
    successful QEXTEND (or of its claim)."""
    for run in seen.runs:
        if run == 0 or not (seen.exact_leases or run == seen.final):
            continue
        for job, g in seen.audits[run].items():
            if g is None:
                continue
            ls = [e for e in seen.leases_of.get(job, ()) if e.inc < run]
            if not ls or g["deliveries"] != ls[-1].deliveries:
                continue                      # rule 5 judges the count
            last = ls[-1]
            if not seen.exact_leases and last.inc != run - 1:
                continue                      # an earlier crash may have lost its records
            done = [o for o in last.ops if o.inc < run]
            if any(o.unknown and o.kind in ("ack", "nack") for o in done):
                continue
            if any(o.success and o.kind == "nack" for o in done):
                if "consumer" in g or g["state"] == b"in_flight":
                    v.bad("rule9", (job, run), f"audit {run}: job {job} released by QNACK of {last.token!r} "
                                               f"is leased again: {g}")
                continue
            # the deadline is the last successful QEXTEND's (it sets, not adds), unless
            # a QEXTEND with a lost reply came after it
            exts = sorted((o for o in done if o.kind == "extend" and (o.success or o.unknown)),
                          key=lambda o: o.t_send)
            end = exts[-1].result if exts and exts[-1].success else last.deadline
            if exts and exts[-1].unknown:
                end = None
            if g.get("consumer") != last.consumer.encode() or (end is not None and g.get("deadline") != end):
                v.bad("rule9", (job, run), f"audit {run}: job {job} should hold lease {last.token!r} of "
                                           f"{last.consumer} until {end}: {g}")


def _why_stale(seen: Seen, o) -> str | None:
    """Why the token of ``o`` was stale when ``o`` was sent, or None: a later
    lease of the job had been granted before (claim time, the daemon's ms
    clock floored, + 1 <= send time), or the token's own lease had been ended
    by a successful QACK/QNACK whose reply had arrived.  With async lease
    records a crash may lose that later claim or that nack, which revives the
    token (docs/semantics.md §5.3); that is excused only across a crash, and
    for a lost claim only if the audit after it shows the claim was indeed not
    recovered."""
    a = o.lease
    for e in seen.leases_of[a.job]:
        if e.order > a.order and e.start + 1 <= o.t_send:
            after = seen.aud(e.inc + 1, e.job)
            recovered = after is None or after["deliveries"] >= e.deliveries
            if seen.exact_leases or e.inc == o.inc or recovered:
                return f"re-claimed as {e.token!r} at {e.start}"
    for p in a.ops:
        if p is o or not p.success or p.kind == "extend" or p.t_recv is None or p.t_recv >= o.t_send:
            continue
        if p.kind == "ack" or seen.exact_leases or p.inc == o.inc:
            return f"its lease ended by {p.kind} (run {p.inc})"
    return None


def check_rule8_stale_tokens_skipped(seen: Seen, v: Verdict) -> None:
    """§4.8 Stale tokens are skipped: a QACK/QNACK/QEXTEND whose token was
    stale when sent (``_why_stale``) must reply 0/nil.  Counts ``stale ops
    checked``."""
    for o in seen.world.ops:
        if o.unknown:
            continue
        why = _why_stale(seen, o)
        if why is None:
            continue
        v.stats["stale ops checked"] += 1
        if o.success:
            v.bad("rule8", (o.lease.token, o.kind, o.t_send),
                  f"{o.kind} with stale token {o.lease.token!r} of job {o.lease.job} (run {o.inc}) "
                  f"replied {o.result}: {why}")


# in this order: the payload checks learn the jobs of pushes whose reply was
# lost before the checks that read ``payload_of``
CHECKS = (check_push_replies, check_claimed_payloads, check_audited_payloads, check_qinfo_matches_qget,
          check_one_job_per_payload, check_lost_pushes_all_or_none, check_no_error_replies,
          check_rule1_pushed_jobs_survive, check_rule2_acked_never_returns, check_rule3_one_lease_holder,
          check_rule5_deliveries_count_tokens, check_rule9_leases_survive, check_rule8_stale_tokens_skipped)


def analyze(world, exact_leases: bool):
    """Count violations of docs/semantics.md §4.1, §4.2, §4.3, §4.5, §4.8, §4.9
    (per job) and of plain integrity (payloads, duplicates, all-or-none pushes,
    QINFO vs QGET, error replies): every checker of ``CHECKS`` in turn.

    Returns (violations per rule, details, stats)."""
    seen = Seen(world, exact_leases)
    verdict = Verdict()
    for check in CHECKS:
        check(seen, verdict)
    return verdict.counts(), verdict.details, verdict.stats
