"""The status page's actions: who may look and act, and how an action runs.

Every action is one RESP command, run for the acting user exactly as if that
user had sent it on a connection of its own: an in-process ``Connection``
(``ActionTransport`` stands in for its socket) logged in as the user, so the
same ACL checks (-NOPERM for a user without ``qpause``), the same -MISCONF
refusal during a disk fault, the same records and the same durability (the
reply, and so the HTTP answer, comes once the command's records are where
its queue's durability says).  The table ``ACTIONS`` names them:

=============  ==================================  ==========================
action         command                             form fields
=============  ==================================  ==========================
pause          QPAUSE queue                        queue
resume         QRESUME queue                       queue
redrive        QREDRIVE queue [ID id]              queue [, id]
delete         QDEL queue id                       queue, id
purge-dead     QPURGE queue DEAD [READY DELAYED]   queue (READY DELAYED too
                                                   on a dead-letter queue)
cancel         QCANCEL queue id                    queue, id
=============  ==================================  ==========================

Who (docs/operations.md, "Status page actions"):

* Looking at the page needs HTTP Basic credentials of an ACL user (the RESP
  users, the same passwords) whenever new RESP connections would need
  AUTH (the default user has a password, or is off).
* An action needs the credentials of a user allowed to run its command; a
  request without them acts as the default user, and only when the default
  user needs no password and the request comes from the loopback interface.
* Every form carries a CSRF token: an HMAC, under a key made at start, of
  the user's name and the moment the page was made.  A token is good for
  ``CSRF_MAX_AGE_S`` and for the user it was made for; one from an earlier
  run of the daemon, an older page or another user is refused (403) and
  nothing runs.

Every action is logged at INFO with the user, the peer and the reply.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

import hiredis

from .connection import Connection
from .protected import is_loopback

log = logging.getLogger(__name__)

CSRF_MAX_AGE_S = 3600
MAX_FORM = 4096                 # bytes of a form body
REPLY_TIMEOUT_S = 30            # an action's command answers within this, or 504


class HttpError(Exception):
    """An answer other than success: an HTTP status and a sentence."""

    def __init__(self, status: str, message: str, headers: tuple = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


@dataclass(frozen=True)
class Action:
    name: str
    label: str                  # the button's text
    needs_id: bool
    command: str                # for the docs and the log

    def args(self, queue: bytes, jid: bytes | None, dead_letter_queue: bool) -> list[bytes]:
        name = self.name
        if name == "pause":
            return [b"QPAUSE", queue]
        if name == "resume":
            return [b"QRESUME", queue]
        if name == "redrive":
            return [b"QREDRIVE", queue] + ([b"ID", jid] if jid is not None else [])
        if name == "delete":
            return [b"QDEL", queue, jid]
        if name == "cancel":
            return [b"QCANCEL", queue, jid]
        states = [b"DEAD", b"READY", b"DELAYED"] if dead_letter_queue else [b"DEAD"]
        return [b"QPURGE", queue] + states


ACTIONS = {a.name: a for a in (
    Action("pause", "Pause", False, "QPAUSE"),
    Action("resume", "Resume", False, "QRESUME"),
    Action("redrive", "Retry", False, "QREDRIVE"),
    Action("delete", "Delete", True, "QDEL"),
    Action("purge-dead", "Delete all", False, "QPURGE"),
    Action("cancel", "Cancel", True, "QCANCEL"),
)}


UNAUTHORIZED = ("WWW-Authenticate", 'Basic realm="leaseq", charset="UTF-8"')


class Access:
    """Who is asking, and the CSRF tokens of the forms shown to them."""

    def __init__(self, server) -> None:
        self.server = server
        self._key = os.urandom(32)      # a new run refuses the tokens of the last one

    def viewer(self, headers: dict) -> str:
        """The user looking at the page: the one the credentials name, or
        "default" when none are needed; 401 otherwise."""
        creds = basic_credentials(headers)
        if creds is not None:
            return self._authenticate(*creds).name
        if self.server.acl.auth_required:
            raise HttpError("401 Unauthorized", "the status page needs a user name and password (an ACL user)",
                            (UNAUTHORIZED,))
        return "default"

    def actor(self, headers: dict, peer: str | None):
        """The ACL user an action runs as (see the module docstring)."""
        creds = basic_credentials(headers)
        if creds is not None:
            return self._authenticate(*creds)
        acl = self.server.acl
        if acl.auth_required:
            raise HttpError("401 Unauthorized", "actions need a user name and password (an ACL user)",
                            (UNAUTHORIZED,))
        require_loopback(peer)
        return acl.default

    def _authenticate(self, name: bytes, password: bytes):
        user = self.server.acl.authenticate(name, password)
        if user is None:
            self.server.stats.acl_access_denied_auth += 1
            raise HttpError("401 Unauthorized", "invalid user name or password, or the user is disabled",
                            (UNAUTHORIZED,))
        return user

    # -- CSRF ---------------------------------------------------------------------------------

    def token(self, user: str, now: float | None = None) -> str:
        issued = int(time.time() if now is None else now)
        return f"{issued}.{self._mac(user, issued)}"

    def check_token(self, token: str, user: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        issued, _, mac = token.partition(".")
        try:
            issued_s = int(issued)
        except ValueError:
            issued_s = None
        if (issued_s is None or not hmac.compare_digest(mac, self._mac(user, issued_s))
                or not 0 <= now - issued_s <= CSRF_MAX_AGE_S):
            raise HttpError("403 Forbidden", "the form's CSRF token is missing, stale or not yours: reload the "
                                             "status page and try again (nothing was changed)")

    def _mac(self, user: str, issued: int) -> str:
        return hmac.new(self._key, f"{user}\n{issued}".encode(), hashlib.sha256).hexdigest()[:32]


def require_loopback(peer: str | None) -> None:
    """An action without credentials, while no password is set: only from
    the loopback interface (403 otherwise)."""
    if not is_loopback(peer):
        raise HttpError("403 Forbidden", "no password is set, so actions are only taken from the loopback "
                                         "interface; set requirepass or give a user name and password")


def basic_credentials(headers: dict) -> tuple[bytes, bytes] | None:
    """(user, password) of an ``Authorization: Basic`` header, or None."""
    value = headers.get(b"authorization")
    if value is None:
        return None
    scheme, _, encoded = value.strip().partition(b" ")
    if scheme.lower() != b"basic":
        raise HttpError("401 Unauthorized", "only HTTP Basic authentication is supported", (UNAUTHORIZED,))
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).partition(b":")
    except (binascii.Error, ValueError):
        user, sep, password = b"", b"", b""
    if not sep:
        raise HttpError("400 Bad Request", "the Authorization header is not user:password in base64")
    return user, password


def parse_form(body: bytes) -> dict[str, str]:
    """A urlencoded form; each field once (a repeated field is refused)."""
    try:
        fields = parse_qs(body.decode("ascii"), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError):
        raise HttpError("400 Bad Request", "the form is not application/x-www-form-urlencoded") from None
    if any(len(v) != 1 for v in fields.values()):
        raise HttpError("400 Bad Request", "a form field is given twice")
    return {k: v[0] for k, v in fields.items()}


async def run_action(server, access: Access, name: str, headers: dict, body: bytes, peer: str | None) -> str:
    """Check and run action ``name``; returns the sentence to show. Raises
    ``HttpError`` for everything refused (nothing changed then)."""
    action = ACTIONS.get(name)
    if action is None:
        raise HttpError("404 Not Found", f"no such action '{name[:64]}'; the actions are "
                                         f"{', '.join(ACTIONS)}")
    user = access.actor(headers, peer)
    form = parse_form(body)
    access.check_token(form.get("csrf", ""), user.name)
    queue = form.get("queue", "")
    if not queue:
        raise HttpError("400 Bad Request", "the form names no queue")
    jid = form.get("id")
    if action.needs_id and not jid:
        raise HttpError("400 Bad Request", f"{action.name} needs the id of a job")
    q = queue.encode()
    targets = {c.config.deadletter for c in server.store.queues.values() if c.config.deadletter}
    args = action.args(q, jid.encode() if jid else None, queue in targets)
    reply = await run_as(server, user, peer, args)
    shown = " ".join(a.decode(errors="replace") for a in args)
    log.info("status page: user %s from %s ran %s: %s", user.name, peer or "?", shown, _describe(reply))
    if isinstance(reply, hiredis.ReplyError):
        raise HttpError(status_of(str(reply)), str(reply))
    return _done(action, queue, jid, reply)


def _done(action: Action, queue: str, jid: str | None, reply) -> str:
    what = f"job {jid} of {queue}" if jid else f"queue {queue}"
    if action.name in ("pause", "resume"):
        return f"{action.name.capitalize()}d {what}."
    verb = {"redrive": "retried", "delete": "deleted", "purge-dead": "deleted", "cancel": "cancelled"}[action.name]
    return f"{reply} {'job' if reply == 1 else 'jobs'} {verb} ({action.command} {what})."


def status_of(error: str) -> str:
    """The HTTP status line of a command's error reply (its code: NOPERM is 403 ...)."""
    code = error.split(" ", 1)[0]
    return {"NOPERM": "403 Forbidden", "NOQUEUE": "404 Not Found", "MISCONF": "503 Service Unavailable",
            "LOADING": "503 Service Unavailable", "OOM": "503 Service Unavailable",
            "READONLY": "503 Service Unavailable", "NOREPLICAS": "503 Service Unavailable"}.get(code, "400 Bad Request")


def _describe(reply) -> str:
    return f"-{reply}" if isinstance(reply, hiredis.ReplyError) else repr(reply)


async def run_as(server, user, peer: str | None, args: list[bytes]):
    """Run one command for ``user`` on an in-process connection and return
    its reply as hiredis reads it (an error is a ``hiredis.ReplyError``)."""
    answered = asyncio.get_running_loop().create_future()
    transport = ActionTransport(peer, answered)
    conn = Connection(server)
    conn.connection_made(transport)
    if conn.closed:                             # refused on admission (shutting down, maxclients)
        return await asyncio.wait_for(answered, REPLY_TIMEOUT_S)
    conn.name = b"status-page"
    conn.authenticated = True
    conn.user = user.name
    conn.acl_user = user
    try:
        conn.data_received(b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]))
        return await asyncio.wait_for(answered, REPLY_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise HttpError("504 Gateway Timeout", "the command did not answer in time") from None
    finally:
        conn.connection_lost(None)


class ActionTransport:
    """What a ``Connection`` writes to, for an action: the first reply
    resolves ``answered``."""

    def __init__(self, peer: str | None, answered: asyncio.Future) -> None:
        self._extra = {"peername": (peer, 0) if peer else None, "sockname": ("status-page", 0)}
        self._reader = hiredis.Reader()
        self._answered = answered
        self._closing = False

    def get_extra_info(self, name, default=None):
        return self._extra.get(name, default)

    def write(self, data: bytes) -> None:
        self._reader.feed(data)
        reply = self._reader.gets()
        if reply is not False and not self._answered.done():
            self._answered.set_result(reply)

    def close(self) -> None:
        self._closing = True

    abort = close

    def is_closing(self) -> bool:
        return self._closing

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
