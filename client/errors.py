"""The exceptions leaseq.client raises for the daemon's error replies.

The daemon starts every error reply with a code word (docs/errors.md).
redis-py raises ``redis.ResponseError`` for most of them, keeps unknown code
words in the message, strips ``ERR`` and turns a few codes into classes of
its own (``OOM`` into ``OutOfMemoryError``, ``NOPERM`` into
``NoPermissionError``), dropping the word.  ``from_response_error`` gives
every one of them back its code and one class to catch, ``LeaseqError``,
with subclasses for the codes a program reacts to differently: a missing
queue, a full queue, a payload too big, a queue dropped under a blocked
claim.  ``LeaseqError`` is a ``redis.ResponseError``, so code written for
plain redis-py keeps catching it.

Errors that are not replies (a refused connection, a timeout, ``LOADING``
and failed authentication, which redis-py reports as connection errors)
stay redis-py's own exceptions.
"""

from __future__ import annotations

import redis


class LeaseqError(redis.ResponseError):
    """An error reply from the daemon: ``code`` is its code word (``ERR``,
    ``NOQUEUE``, ...), ``message`` the sentence after it; ``str()`` gives
    the reply as the daemon wrote it."""

    code = "ERR"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or type(self).code

    def __str__(self) -> str:
        return f"{self.code} {self.message}"

    def __repr__(self) -> str:        # redis-py's would print only "server:<class>"
        return f"{type(self).__name__}({str(self)!r})"


class NoQueue(LeaseqError):
    """The queue does not exist, and the command does not create queues
    (QACK, QNACK, QEXTEND, QINFO, QLEN; pushes and claims when the daemon
    runs with ``auto-create no``)."""

    code = "NOQUEUE"


class Full(LeaseqError):
    """The queue holds MAXLEN live jobs; nothing was pushed."""

    code = "FULL"


class TooBig(LeaseqError):
    """A payload is larger than the daemon's ``max-payload``; nothing was
    pushed."""

    code = "TOOBIG"


class Closed(LeaseqError):
    """The queue was dropped (``QDROP ... FORCE``) while a claim was blocked
    on it."""

    code = "CLOSED"


class NoJob(LeaseqError):
    """QRESULT: the queue does not know the job, its result expired, or it
    was acked without a result."""

    code = "NOJOB"


class JobDead(LeaseqError):
    """QRESULT: the job died or was cancelled; ``message`` is the reason
    (``max-deliveries``, ``nack``, ``expired``, ``parent-failed``, ``cancelled``)."""

    code = "DEAD"


CLASSES: dict[str, type[LeaseqError]] = {cls.code: cls for cls in (NoQueue, Full, TooBig, Closed, NoJob, JobDead)}

# leaseq's codes that redis-py leaves at the start of the message
OWN_CODES = frozenset({"NOQUEUE", "EXISTS", "FULL", "TOOBIG", "NOTEMPTY", "CLOSED", "MISCONF", "NOPROTO", "DENIED",
                       "NOJOB", "DEAD", "NOMASTERLINK", "NOREPLICAS"})

# redis-py's classes for codes whose word it removes from the message
_REDIS_CLASS_CODES = {"OutOfMemoryError": "OOM", "NoPermissionError": "NOPERM", "ExecAbortError": "EXECABORT",
                      "ReadOnlyError": "READONLY"}


def from_response_error(error: redis.ResponseError) -> LeaseqError:
    """The ``LeaseqError`` (or subclass) for an error reply redis-py raised."""
    code, message = _code_and_message(error)
    return CLASSES.get(code, LeaseqError)(message, code)


def _code_and_message(error: redis.ResponseError) -> tuple[str, str]:
    text = str(error)
    word, _, rest = text.partition(" ")
    if word in OWN_CODES:
        return word, rest
    code = _REDIS_CLASS_CODES.get(type(error).__name__) or getattr(error, "status_code", None) or "ERR"
    return code, text
