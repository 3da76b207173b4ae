"""The HTTP listener (``http-port``, off by default; ``http-bind``): probes,
metrics and a status page on the daemon's own event loop.

``GET /``         the status page, HTML (``daemon.status``): queues, their
                  rates and dead letters, the log and snapshots; it
                  refreshes itself every 2 s.
``GET /healthz``  200 ``ok``: the process serves.
``GET /readyz``   200 ``ready`` once recovery is done and the log can be
                  written; 503 with the reason otherwise (loading, or the
                  disk refuses the log).
``GET /metrics``  Prometheus text format (``daemon.metrics``).
``GET /api/queues``      every queue's QINFO, JSON: ``{"queues": [{...}, ...]}``,
                  by name.
``GET /api/queues/<q>``  one queue's QINFO, JSON (what an autoscaler such as
                  KEDA's ``metrics-api`` scaler reads, e.g. ``ready``);
                  404 with ``{"error": ...}`` for a queue that is not there.
``GET /api/queues/<q>/history?from=&to=``  the queue's kept minutes, JSON
                  (``{"queue", "from", "to", "fields", "minutes": [{"minute",
                  ...}]}``: what QHISTORY answers); ``from``/``to`` ms epoch
                  (default 0 and now), 400 when not such a number, 404 for a
                  queue that neither exists nor has history.
``GET /search?queue=q&...``  a queue's search, ``POST /search/confirm`` and
                  ``POST /search/act`` its bulk actions (``daemon.search``).
``POST /action/<name>``  one of the status page's actions (``daemon.actions``:
                  who may, the CSRF token, the command it runs); success
                  answers 303 back to the page with a sentence to show, a
                  refusal 4xx (or 503 during a disk fault) with a sentence.

The status page and the JSON API need HTTP Basic credentials of an ACL
user whenever RESP connections need AUTH; the probes and /metrics never do (a probe or a
scraper rarely carries a password, and they show no payloads).

HEAD gets the same status and headers as GET, without the body.  A request
is one line, headers and (for a POST) a small form body; the answer closes
the connection.  Anything else is 404 (path) or 405 (method).  The few
lines of HTTP here are all the listener needs; a web framework would add a
dependency and a second event loop's worth of machinery for five endpoints.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
import logging
import time

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from urllib.parse import parse_qs, quote, unquote_to_bytes

from leaseq.commands.history import minutes, window
from leaseq.commands.queues import MS_MAX, info_items
from leaseq.storage.history import FIELDS

from .actions import MAX_FORM, Access, HttpError, run_action
from .charts import DEFAULT_RANGE, chosen_range, read_charts
from .search import SearchPages
from .status import RateSamples, read_status, refusal_page, render

log = logging.getLogger(__name__)

MAX_HEAD = 8192
PATHS = (b"/", b"/healthz", b"/readyz", b"/metrics")
SEARCH_PATHS = (b"/search", b"/search/confirm", b"/search/act")
API = b"/api/queues"
HISTORY = b"/history"
HTML = "text/html; charset=utf-8"
JSON = "application/json"
BAD_REQUEST = ("400 Bad Request", "text/plain", b"bad request\n")


class HttpListener:
    def __init__(self, server) -> None:
        self.server = server
        self.rates = RateSamples()          # what the status page's rates are computed from
        self.access = Access(server)        # who may look and act, and the forms' CSRF tokens
        self.search = SearchPages(server, self.access)  # a queue's search and bulk actions, and their plans
        self._listener = None
        self._sampling: asyncio.Task | None = None

    async def start(self, bind: str, port: int) -> int:
        self._listener = await asyncio.start_server(self._serve, bind, port, reuse_address=True)
        self._sampling = asyncio.get_running_loop().create_task(self._sample_rates())
        bound = self._listener.sockets[0].getsockname()[1]
        log.info("HTTP listener on %s:%d (/, /healthz, /readyz, /metrics)", bind, bound)
        return bound

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._sampling is not None:
            self._sampling.cancel()

    async def _sample_rates(self) -> None:
        """Once a second while the listener is open, so that a rate covers
        the last seconds however rarely the page is looked at."""
        while True:
            self.rates.sample(self.server.store.queues.values(), time.monotonic())
            await asyncio.sleep(1)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = None
        headers: dict = {}
        extra: tuple = ()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            request = request_line(head[:MAX_HEAD])
            headers = headers_of(head)
            peer = writer.get_extra_info("peername")
            host = peer[0] if isinstance(peer, tuple) else None
            if request is None:
                status, ctype, body = BAD_REQUEST
            elif request[0] == b"POST" and request[1].startswith(b"/action/"):
                status, ctype, body, extra = await self._action(request[1], headers, reader, host)
            elif request[1] in SEARCH_PATHS:
                status, ctype, body, extra = await self._search(request, headers, reader, host)
            elif request[1] == API or request[1].startswith(API + b"/"):
                status, ctype, body = await self.api(request[0], request[1], headers, request[2])
            else:
                status, ctype, body = self.answer(*request)
                if body == self.status_page:
                    body = self._page_for(headers, request[2])
            if callable(body):               # made on demand: the page and the metrics
                body = await body()
        except HttpError as e:
            status, extra = e.status, e.headers
            if b"text/html" in headers.get(b"accept", b""):        # a browser: a page with the way back
                ctype, body = HTML, refusal_page(e.message).encode()
            else:
                ctype, body = "text/plain; charset=utf-8", (e.message + "\n").encode()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            status, ctype, body = BAD_REQUEST
        except Exception:                   # a bug in making a body: answer it, and keep serving
            log.exception("HTTP %s failed", request)
            status, ctype, body = "500 Internal Server Error", "text/plain", b"internal error: see the daemon's log\n"
        sent = b"" if request is not None and request[0] == b"HEAD" else body
        more = "".join(f"{k}: {v}\r\n" for k, v in extra)
        try:
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         f"{more}Connection: close\r\n\r\n".encode() + sent)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _action(self, target: bytes, headers: dict, reader: asyncio.StreamReader, host: str | None) -> tuple:
        """POST /action/<name>: read the form, run the action; 303 back to the page."""
        body = await _form_body(headers, reader)
        name = target[len(b"/action/"):].decode(errors="replace")
        done = await run_action(self.server, self.access, name, headers, body, host)
        return ("303 See Other", "text/plain; charset=utf-8", (done + "\n").encode(),
                (("Location", "/?done=" + quote(done)),))

    async def _search(self, request: tuple, headers: dict, reader: asyncio.StreamReader, host: str | None) -> tuple:
        """GET /search, POST /search/confirm, POST /search/act (``daemon.search``)."""
        method, target, query = request
        if target == b"/search":
            if method not in (b"GET", b"HEAD"):
                return "405 Method Not Allowed", "text/plain", b"only GET\n", ()
            return "200 OK", HTML, await self.search.get(headers, query), ()
        if method != b"POST":
            return "405 Method Not Allowed", "text/plain", b"a bulk action is a POST (a button of the search)\n", ()
        body = await _form_body(headers, reader)
        if target == b"/search/confirm":
            return "200 OK", HTML, await self.search.confirm(headers, body, host), ()
        location, done = await self.search.run(headers, body, host)
        return "303 See Other", "text/plain; charset=utf-8", (done + "\n").encode(), (("Location", location),)

    async def api(self, method: bytes, target: bytes, headers: dict, query: bytes = b"") -> tuple:
        """GET /api/queues[/<q>[/history]]: QINFO or the history as JSON, for
        whoever may see the page."""
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        self.access.viewer(headers)                  # 401 without the credentials the page needs
        server = self.server
        if server.loading:
            return "503 Service Unavailable", JSON, _json({"error": "loading: recovering the data directory"})
        await server.disk.until_rebuilt()
        store = server.store
        if target == API:
            queues = sorted(store.queues.values(), key=lambda q: q.name)
            return "200 OK", JSON, _json({"queues": [_info(server, q) for q in queues]})
        rest = target[len(API) + 1:]
        if rest.endswith(HISTORY):
            return _history(server, unquote_to_bytes(rest[:-len(HISTORY)]), query)
        name = unquote_to_bytes(rest)
        q = store.queues.get(name)
        if q is None:
            return "404 Not Found", JSON, _json({"error": f"no such queue {name.decode(errors='replace')!r}"})
        return "200 OK", JSON, _json(_info(server, q))

    def _page_for(self, headers: dict, query: bytes):
        """The status page for whoever asks (401 without the credentials it
        needs), its forms carrying their CSRF token, and the sentence an
        action left in ``?done=``."""
        user = self.access.viewer(headers)
        token = self.access.token(user)
        notice = parse_qs(query.decode("ascii", "replace")).get("done", [""])[0][:300]
        span = chosen_range(query)

        async def page() -> bytes:
            return await self.status_page(user, token, notice, span)
        return page

    def answer(self, method: bytes, target: bytes, query: bytes = b"") -> tuple:
        """(status line, content type, body): the body is bytes, or for the
        status page and /metrics the coroutine function that makes them."""
        if target.startswith(b"/action/"):
            return "405 Method Not Allowed", "text/plain", b"an action is a POST (a button of the status page)\n"
        if target not in PATHS:
            return "404 Not Found", "text/plain", b"not found: try /, /healthz, /readyz, /metrics or /api/queues\n"
        if method not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET (actions are POST /action/<name>)\n"
        server = self.server
        if target == b"/":
            return "200 OK", HTML, self.status_page
        if target == b"/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if target == b"/readyz":
            if server.loading:
                return "503 Service Unavailable", "text/plain", b"loading: recovering the data directory\n"
            if server.disk_error is not None:
                reason = server.disk_error.strerror or str(server.disk_error)
                return "503 Service Unavailable", "text/plain", f"the log cannot be written: {reason}\n".encode()
            return "200 OK", "text/plain", b"ready\n"
        return "200 OK", CONTENT_TYPE_LATEST, self.metrics

    async def status_page(self, user: str = "default", token: str = "", notice: str = "",
                          span: str = DEFAULT_RANGE) -> bytes:
        """The state is read on the loop (it is live); the HTML is written in
        a worker thread, like the metrics' text.  ``span``: the range of the
        history's charts (daemon/charts.py)."""
        await self.server.disk.until_rebuilt()       # never a page of refused changes (daemon/faults.py)
        status = read_status(self.server, self.rates, user=user, csrf=token, notice=notice)
        if self.server.history is not None:
            status = replace(status, charts=read_charts(self.server, span))
        return await asyncio.get_running_loop().run_in_executor(None, _html, status)

    async def metrics(self) -> bytes:
        """The figures are read on the loop (they are live state); turning
        them into text, most of a scrape's time, runs in a worker thread."""
        await self.server.disk.until_rebuilt()
        families = list(self.server.metrics.collect())
        return await asyncio.get_running_loop().run_in_executor(None, generate_latest, _Collected(families))


async def _form_body(headers: dict, reader: asyncio.StreamReader) -> bytes:
    """The body of a POSTed form, at most ``MAX_FORM`` bytes."""
    try:
        length = int(headers.get(b"content-length", b"0"))
    except ValueError:
        raise HttpError("400 Bad Request", "Content-Length is not a number") from None
    if not 0 <= length <= MAX_FORM:
        raise HttpError("413 Content Too Large", f"a form is at most {MAX_FORM} bytes")
    return await asyncio.wait_for(reader.readexactly(length), 10) if length else b""


def _info(server, q) -> dict:
    """A queue's QINFO as a JSON object: names and text as str."""
    return {k.decode(): (v.decode(errors="replace") if isinstance(v, bytes) else v) for k, v in info_items(server, q)}


def _history(server, name: bytes, query: bytes) -> tuple[str, str, bytes]:
    """GET /api/queues/<q>/history: what QHISTORY answers
    (``commands.history``), its FROM and TO read from ``?from=&to=``."""
    args = parse_qs(query.decode("ascii", "replace"), keep_blank_values=True)
    given = []
    for key in ("from", "to"):
        text = args[key][-1] if args.get(key) else None
        if text is not None and (not text.isdigit() or int(text) > MS_MAX):
            return "400 Bad Request", JSON, _json(
                {"error": f"{key} must be a time in ms since the epoch (0 to 2^53), not {text!r}"})
        given.append(None if text is None else int(text))
    lo, hi = window(server, *given)
    found = minutes(server, name, lo, hi)
    if found is None:
        return "404 Not Found", JSON, _json({"error": f"no such queue {name.decode(errors='replace')!r}"})
    return "200 OK", JSON, _json({"queue": name.decode(errors="replace"), "from": lo, "to": hi,
                                  "fields": list(FIELDS), "minutes": found})


def _json(value) -> bytes:
    return (json.dumps(value, separators=(",", ":")) + "\n").encode()


def request_line(head: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(method, path, query) of a request's head; None when the first line
    is not an HTTP request line."""
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return None
    path, _, query = parts[1].partition(b"?")
    return parts[0], path, query


def headers_of(head: bytes) -> dict[bytes, bytes]:
    """The header fields of a request's head, names lower-cased (the last of a repeated one)."""
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields


def _html(status) -> bytes:
    return render(status).encode()


class _Collected:
    """A registry that hands out metric families read beforehand."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)
