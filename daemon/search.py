"""The status page's search of one queue, and its bulk actions on every match
(docs/operations.md, "Search and bulk actions").

``GET /search?queue=q&match=&meta_field=&meta=&error=&state=&after=``
    a form, the number of matches (by state) and the first ``PAGE`` of them
    (those with an id above ``after``): QSCAN's filters (``JobFilter``, the
    same one), read by the viewer, who must be allowed to run QSCAN on the
    queue.
``POST /search/confirm`` (the filter, ``action``, ``csrf``)
    finds every match the action would take and keeps that list, the
    *plan* (ids and the state each was in), for ``PLAN_TTL_S``; the page
    names the count ("Cancel 1,234 jobs matching …?") and carries the plan's
    id and the CSRF token.
``POST /search/act`` (``plan``, ``csrf``)
    acts on the plan's jobs: a job gone, in another state than when it was
    counted, or no longer matching, is skipped; then 303 back to the search
    with a sentence saying how many were acted on and how many skipped.

Nothing here changes a job itself: each slice of a bulk action is one
command (QCANCEL, QDEL, or QREDRIVE ID, with up to ``search-slice`` ids) run
for the acting user exactly as the page's other actions run theirs
(``daemon.actions.run_as``): the same ACL checks, records, replication and
durability as a client sending it.  The check of a slice's jobs and its
command run in the same turn of the loop, so nothing changes between them.

Both the search and the actions work in slices of ``search-slice`` jobs (a
setting), returning to the event loop between slices, so a search over a
million jobs keeps every other client's wait short (``leaseq bench search``
measures it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

import hiredis

from leaseq.commands import acl
from leaseq.commands.errors import Error
from leaseq.commands.inspect import STATES, JobFilter, redrivable
from leaseq.commands.results import ENDED
from leaseq.commands.table import TABLE
from leaseq.storage import queries
from leaseq.storage.job import CANCELLED, COMPLETED, DEAD, DELAYED, IN_FLIGHT, READY, WAITING

from .actions import HttpError, parse_form, run_as, status_of
from .html import cut, document, duration, esc, header, text
from .status import MAX_ERROR_BYTES

log = logging.getLogger(__name__)

PAGE = 50                   # matches listed on a search page
PAYLOAD_SHOWN = 120         # bytes of a payload shown
PLAN_TTL_S = 900            # a confirmation is good for this long
MAX_PLANS = 8               # plans kept at once (the oldest goes first)

STATE_ORDER = (READY, DELAYED, WAITING, IN_FLIGHT, DEAD, COMPLETED, CANCELLED)
STATE_CODE = {s: i for i, s in enumerate(STATE_ORDER)}


@dataclass(frozen=True)
class BulkAction:
    """A bulk action: its words, its command, and which matches it takes."""
    name: str
    verb: str               # "Cancel"
    done: str               # "cancelled"
    label: str              # its button: "Cancel matches"
    left: str               # why the matches it does not take are left ("" when it takes every match)
    command: bytes
    rule: Callable          # whether a match is taken: a function of its state, or (not by_state) of the job
    by_state: bool = True
    before_ids: tuple = ()  # what the command takes between the queue and the ids

    def takes(self, job) -> bool:
        return self.rule(job.state if self.by_state else job)

    def taken(self, counts: dict) -> int | None:
        """How many of the matches, counted by state, it would take; None
        when their states alone do not say."""
        return sum(n for state, n in counts.items() if self.rule(state)) if self.by_state else None

    def args(self, queue: bytes, ids: list[bytes]) -> list[bytes]:
        return [self.command, queue, *self.before_ids, *ids]


BULK = {a.name: a for a in (
    BulkAction("cancel", "Cancel", "cancelled", "Cancel matches", "already ended (completed, dead or cancelled)",
               b"QCANCEL", lambda state: state not in ENDED),
    BulkAction("delete", "Delete", "deleted", "Delete matches", "", b"QDEL", lambda state: True),
    BulkAction("retry", "Retry", "retried", "Retry dead matches", "not dead letters", b"QREDRIVE", redrivable,
               by_state=False, before_ids=(b"ID",)),
)}


@dataclass(frozen=True)
class Search:
    """What the form asks: the queue and the filters, as text."""
    queue: str
    match: str = ""
    meta_field: str = ""
    meta: str = ""
    error: str = ""
    state: str = ""

    FIELDS = ("queue", "match", "meta_field", "meta", "error", "state")

    @classmethod
    def of(cls, fields: dict) -> Search:
        s = cls(**{k: fields.get(k, "") for k in cls.FIELDS})
        if not s.queue:
            raise HttpError("400 Bad Request", "the search names no queue")
        if s.state and s.state.encode() not in STATES:
            raise HttpError("400 Bad Request", "state must be one of " + ", ".join(x.decode() for x in STATES))
        if bool(s.meta_field) != bool(s.meta):
            raise HttpError("400 Bad Request", "a META filter needs both a field and a glob")
        return s

    def job_filter(self) -> JobFilter:
        def b(text: str) -> bytes | None:
            return text.encode() if text else None
        try:
            return JobFilter(STATES[self.state.encode()] if self.state else None, b(self.match),
                             (self.meta_field.encode(), self.meta.encode()) if self.meta_field else None,
                             b(self.error))
        except Error as e:
            raise HttpError("400 Bad Request", e.message) from None

    def query(self, **more) -> str:
        return urlencode({k: v for k, v in ((k, getattr(self, k)) for k in self.FIELDS) if v} | more)

    def describe(self) -> str:
        """The filter in words: 'payload order:* · META customer = acme · error timeout* · state dead'."""
        words = []
        if self.match:
            words.append(f"payload {self.match}")
        if self.meta_field:
            words.append(f"META {self.meta_field} = {self.meta}")
        if self.error:
            words.append(f"error {self.error}")
        if self.state:
            words.append(f"state {self.state}")
        return " · ".join(words) or "anything"


@dataclass
class Found:
    """A search's answer."""
    counts: dict = field(default_factory=dict)      # state -> matches
    jobs: list = field(default_factory=list)        # the first PAGE matches above ``after``
    more: bool = False                              # matches beyond the page
    looked_at: int = 0
    slices: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class Plan:
    """The matches a confirmed action will take: ids, and the state each was in."""
    id: str
    user: str
    search: Search
    action: BulkAction
    ids: array
    states: bytearray
    made: float
    matches: int            # all matches, taken or not

    @property
    def count(self) -> int:
        return len(self.ids)


async def walk(server, search: Search, keep: JobFilter, visit) -> tuple[int, int]:
    """Every job of the queue ``keep`` is true of, in id order, handed to
    ``visit(q, jobs)`` a slice at a time, returning to the loop between
    slices; (jobs the queue held at the start, slices).  Stops early when the queue is
    dropped, or when ``visit`` returns True."""
    name = search.queue.encode()
    cursor, slices = 0, 0
    q = server.store.queues.get(name)
    looked = 0 if q is None else len(q.jobs)
    while True:
        q = server.store.queues.get(name)
        if q is None:
            break
        size = server.settings.search_slice
        server.store.fold(q, server.now_ms())
        cursor, jobs = queries.scan(q, cursor, size, keep.state, keep.keep)
        slices += 1
        if visit(q, jobs) or cursor == 0:
            break
        await asyncio.sleep(0)
    return looked, slices


class SearchPages:
    """The three endpoints above, for one HTTP listener; it keeps the plans."""

    def __init__(self, server, access) -> None:
        self.server = server
        self.access = access
        self.plans: dict[str, Plan] = {}

    # -- reading --------------------------------------------------------------------------------

    def _queue_of(self, search: Search, user) -> None:
        """404 for a queue that is not there; 403 for a user who may not QSCAN it."""
        name = search.queue.encode()
        if user is not None and not user.unrestricted:
            args = [b"QSCAN", name, b"0"]
            denied = acl.command_refusal(user, TABLE[b"qscan"], args) or acl.queue_refusal(user, name, "R")
            if denied is not None:
                raise HttpError("403 Forbidden", str(denied))
        if self.server.loading:
            raise HttpError("503 Service Unavailable", "loading: recovering the data directory")
        if name not in self.server.store.queues:
            raise HttpError("404 Not Found", f"no such queue '{search.queue[:200]}'")

    async def find(self, search: Search, after: int = 0) -> Found:
        keep = search.job_filter()
        found = Found()
        started = time.perf_counter()

        def visit(q, jobs) -> None:
            for job in jobs:
                found.counts[job.state] = found.counts.get(job.state, 0) + 1
                if job.id > after:
                    if len(found.jobs) < PAGE:
                        found.jobs.append(_row(job))
                    else:
                        found.more = True
        found.looked_at, found.slices = await walk(self.server, search, keep, visit)
        found.seconds = time.perf_counter() - started
        return found

    async def plan(self, search: Search, action: BulkAction, user: str) -> Plan:
        keep = search.job_filter()
        ids, states = array("q"), bytearray()
        matches = 0

        def visit(q, jobs) -> None:
            nonlocal matches
            matches += len(jobs)
            for job in jobs:
                if action.takes(job):
                    ids.append(job.id)
                    states.append(STATE_CODE[job.state])
        await walk(self.server, search, keep, visit)
        now = time.monotonic()
        for pid in [p.id for p in self.plans.values() if now - p.made > PLAN_TTL_S]:
            del self.plans[pid]
        while len(self.plans) >= MAX_PLANS:
            del self.plans[next(iter(self.plans))]
        plan = Plan(os.urandom(12).hex(), user, search, action, ids, states, now, matches)
        self.plans[plan.id] = plan
        return plan

    async def act(self, plan: Plan, user, peer: str | None) -> tuple[int, int]:
        """(jobs acted on, slices): the plan's jobs still as they were, one
        command a slice."""
        server = self.server
        name = plan.search.queue.encode()
        keep = plan.search.job_filter()
        action = plan.action
        acted = slices = 0
        i = 0
        while i < plan.count:
            q = server.store.queues.get(name)
            if q is None:
                break
            size = server.settings.search_slice
            server.store.fold(q, server.now_ms())
            take = []
            for k in range(i, min(i + size, plan.count)):
                job = q.jobs.get(plan.ids[k])
                if (job is not None and job.state is STATE_ORDER[plan.states[k]] and keep(job)
                        and action.takes(job)):
                    take.append(b"%d" % job.id)
            i += size
            slices += 1
            if take:
                reply = await run_as(server, user, peer, action.args(name, take))
                if isinstance(reply, hiredis.ReplyError):
                    log.info("status page: user %s from %s: bulk %s on %s stopped after %d jobs: -%s",
                             user.name, peer or "?", action.name, plan.search.queue, acted, reply)
                    raise HttpError(status_of(str(reply)), f"{reply} (after {acted:,} jobs {action.done})")
                acted += reply
            await asyncio.sleep(0)
        log.info("status page: user %s from %s ran bulk %s on %s matching %s: %d of %d jobs in %d slices",
                 user.name, peer or "?", action.name, plan.search.queue, plan.search.describe(), acted,
                 plan.count, slices)
        return acted, slices

    # -- the endpoints --------------------------------------------------------------------------

    async def get(self, headers: dict, query: bytes) -> bytes:
        viewer = self.access.viewer(headers)
        fields = {k: v[0] for k, v in parse_qs(query.decode("ascii", "replace"), keep_blank_values=True).items()}
        search = Search.of(fields)
        self._queue_of(search, self.server.acl.users.get(viewer))
        try:
            after = max(0, int(fields.get("after", "0") or 0))
        except ValueError:
            raise HttpError("400 Bad Request", "after must be a job id") from None
        await self.server.disk.until_rebuilt()
        found = await self.find(search, after)
        page = SearchPage(search=search, found=found, after=after, user=viewer, csrf=self.access.token(viewer),
                          now_ms=self.server.now_ms(), notice=fields.get("done", "")[:300],
                          read_only=self.server.read_only)
        return (await asyncio.get_running_loop().run_in_executor(None, render_search, page)).encode()

    async def confirm(self, headers: dict, body: bytes, peer: str | None) -> bytes:
        user = self.access.actor(headers, peer)
        form = parse_form(body)
        self.access.check_token(form.get("csrf", ""), user.name)
        action = BULK.get(form.get("action", ""))
        if action is None:
            raise HttpError("400 Bad Request", "action must be one of " + ", ".join(BULK))
        search = Search.of(form)
        self._queue_of(search, user)
        plan = await self.plan(search, action, user.name)
        return render_confirmation(plan, self.access.token(user.name)).encode()

    async def run(self, headers: dict, body: bytes, peer: str | None) -> tuple[str, str]:
        """(the location to go back to, carrying the sentence; the sentence)."""
        user = self.access.actor(headers, peer)
        form = parse_form(body)
        self.access.check_token(form.get("csrf", ""), user.name)
        plan = self.plans.get(form.get("plan", ""))
        if plan is None or plan.user != user.name or time.monotonic() - plan.made > PLAN_TTL_S:
            raise HttpError("409 Conflict", "this confirmation is unknown or has expired: search again and "
                                            "confirm (nothing was changed)")
        del self.plans[plan.id]                 # a confirmation acts once
        acted, slices = await self.act(plan, user, peer)
        skipped = plan.count - acted
        a = plan.action
        done = (f"{a.done.capitalize()} {acted:,} of {plan.count:,} {_jobs(plan.count)} matching "
                f"{plan.search.describe()} in {plan.search.queue} ({a.command.decode()}, {slices:,} "
                f"{'slice' if slices == 1 else 'slices'}); {skipped:,} skipped: changed since the confirmation.")
        return "/search?" + plan.search.query(done=done), done


def _jobs(n: int) -> str:
    return "job" if n == 1 else "jobs"


# -- HTML ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    id: int
    state: str
    priority: int
    deliveries: int
    enqueued_at: int
    payload: str
    meta: str
    error: str


def _row(job) -> Row:
    meta = " ".join(f"{text(k)}={text(v)}" for k, v in job.meta or ())
    return Row(job.id, text(job.state), job.priority, job.deliveries, job.enqueued_at, cut(job.payload, PAYLOAD_SHOWN),
               meta[:MAX_ERROR_BYTES], cut(job.last_error, MAX_ERROR_BYTES))


@dataclass(frozen=True)
class SearchPage:
    search: Search
    found: Found
    after: int
    user: str
    csrf: str
    now_ms: int             # the daemon's clock (a job's age is on it)
    notice: str = ""
    read_only: bool = False


SEARCH_CSS = """
form.search { display: flex; flex-wrap: wrap; gap: 8px 14px; align-items: end; margin: 12px 0 4px; }
form.search label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); gap: 2px; }
form.search input, form.search select { font: inherit; font-size: 13px; padding: 3px 6px; border: 1px solid var(--line);
                                        border-radius: 5px; min-width: 14ch; }
form.search button, form.bulk button, form.confirm button { font: inherit; font-size: 13px; padding: 3px 12px;
        border: 1px solid var(--line); border-radius: 5px; background: #fff; cursor: pointer; }
form.bulk { display: inline; margin-right: 6px; }
button.danger { color: var(--bad); border-color: #ffcecb; }
button.danger:hover { background: var(--bad-bg); }
button:disabled { color: var(--faint); border-style: dashed; cursor: not-allowed; }
.bulkbar { margin: 8px 0 2px; }
td.payload { white-space: normal; overflow-wrap: anywhere; max-width: 50ch; }
p.question { font-size: 17px; margin: 18px 0 8px; }
p.question b { font-variant-numeric: tabular-nums; }
.back { margin: 10px 0 0; }
"""


def _hidden(search: Search) -> str:
    return "".join(f'<input type="hidden" name="{k}" value="{esc(getattr(search, k))}">' for k in Search.FIELDS)


def render_search(page: SearchPage) -> str:
    """The search page: the form, the counts, a page of matches, the bulk buttons."""
    s, found = page.search, page.found
    options = "".join(f'<option value="{v}"{" selected" if v == s.state else ""}>{v or "any"}</option>'
                      for v in ("",) + tuple(x.decode() for x in STATES))
    form = (f'<form class="search" method="get" action="/search">'
            f'<input type="hidden" name="queue" value="{esc(s.queue)}">'
            f'<label>payload glob<input name="match" value="{esc(s.match)}" placeholder="order:*"></label>'
            f'<label>META field<input name="meta_field" value="{esc(s.meta_field)}" placeholder="customer"></label>'
            f'<label>META glob<input name="meta" value="{esc(s.meta)}" placeholder="acme*"></label>'
            f'<label>error glob<input name="error" value="{esc(s.error)}" placeholder="*timeout*"></label>'
            f'<label>state<select name="state">{options}</select></label>'
            '<button type="submit">Search</button></form>')
    by_state = " · ".join(f"{text(st)} {found.counts[st]:,}" for st in STATE_ORDER if found.counts.get(st))
    summary = (f'<h2>Matches<span class="count" id="match-count">{found.total:,}</span></h2>'
               f'<p class="note">{esc(by_state) + "; " if by_state else ""}{found.looked_at:,} jobs searched in '
               f"{found.slices:,} {'slice' if found.slices == 1 else 'slices'}, "
               f"{esc(duration(found.seconds * 1000))}.</p>")
    return document(f"search {s.queue}", SEARCH_CSS, "".join([
        header("search", "ok", [("queue", s.queue), ("matching", s.describe()), ("user", page.user)], linked=True),
        f'<p class="alert ok" id="notice">{esc(page.notice)}</p>' if page.notice else "",
        "<main>", '<p class="back"><a href="/">Back to the status page</a></p>', form, summary,
        _bulk_bar(page) if found.total else "", _matches(page), "</main>"]))


def _bulk_bar(page: SearchPage) -> str:
    s = page.search
    buttons = []
    for action in BULK.values():
        label = action.label
        disabled = page.read_only or action.taken(page.found.counts) == 0
        title = f"{label} of {s.queue} ({s.describe()})" + (
            " (a replica refuses changes: use the primary's page)" if page.read_only else "")
        buttons.append(f'<form class="bulk" method="post" action="/search/confirm">{_hidden(s)}'
                       f'<input type="hidden" name="action" value="{action.name}">'
                       f'<input type="hidden" name="csrf" value="{esc(page.csrf)}">'
                       f'<button type="submit" class="danger" title="{esc(title)}"'
                       f'{" disabled" if disabled else ""}>{esc(label)}…</button></form>')
    return (f'<div class="bulkbar">{"".join(buttons)}<span class="note">on every match, after a confirmation '
            "that names the count</span></div>")


def _matches(page: SearchPage) -> str:
    found = page.found
    if not found.jobs:
        return '<p class="note">No matches' + (" after this page." if page.after else ".") + "</p>"
    now_ms = page.now_ms
    rows = "".join(
        f'<tr><td class="n">{r.id}</td><td>{esc(r.state)}</td><td class="n">{r.priority}</td>'
        f'<td class="n">{r.deliveries}</td><td class="n">{esc(duration(max(0, now_ms - r.enqueued_at)))}</td>'
        f'<td class="payload mono">{esc(r.payload)}</td><td class="mono">{esc(r.meta) or "–"}</td>'
        f'<td class="error mono">{esc(r.error) or "–"}</td></tr>' for r in found.jobs)
    first = "the first" if not page.after else f"after job {page.after}, the next"
    nxt = ""
    if found.more:
        nxt = (f'<p class="note"><a id="next-page" href="/search?{esc(page.search.query(after=found.jobs[-1].id))}">'
               f"Next {PAGE} matches</a></p>")
    return (f'<h3 class="note">{first} {len(found.jobs)} by id</h3><table id="matches"><thead><tr>'
            '<th class="n">job</th><th>state</th><th class="n">priority</th><th class="n">deliveries</th>'
            '<th class="n">age</th><th>payload</th><th>META</th><th>last error</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>{nxt}")


def render_confirmation(plan: Plan, csrf: str) -> str:
    """"Cancel 1,234 jobs matching …?": the count, the filter, one button."""
    a, s = plan.action, plan.search
    back = f'<p class="back"><a href="/search?{esc(s.query())}">No, back to the search</a></p>'
    others = plan.matches - plan.count
    note = (f'<p class="note">{others:,} other {"match is" if others == 1 else "matches are"} {a.left}: '
            "left as they are.</p>" if others else "")
    if not plan.count:
        body = (f'<p class="question" id="question">No job matching {esc(s.describe())} in {esc(s.queue)} can be '
                f"{a.done}.</p>{note}{back}")
    else:
        body = (f'<p class="question" id="question">{a.verb} <b>{plan.count:,}</b> {_jobs(plan.count)} matching '
                f'<span class="mono">{esc(s.describe())}</span> in <span class="mono">{esc(s.queue)}</span>?</p>'
                f'{note}<p class="note">Each slice of {esc(a.command.decode())} runs as you, logged like any '
                "client's command; jobs that change state before their slice runs are skipped.</p>"
                f'<form class="confirm" method="post" action="/search/act">'
                f'<input type="hidden" name="plan" value="{esc(plan.id)}">'
                f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
                f'<button type="submit" class="danger" id="confirm">{a.verb} {plan.count:,} '
                f"{_jobs(plan.count)}</button></form>{back}")
    return document(f"confirm {a.name}", SEARCH_CSS,
                    header("confirm", "ok", [("queue", s.queue), ("user", plan.user)], linked=True)
                    + f"<main>{body}</main>")
