"""Work streams through pub/sub: ``SUBSCRIBE "QWORK queue consumer [MAX n]
[LEASE ms]"`` (docs/semantics.md §3.3, "QWORK through SUBSCRIBE").

QWORK's own push frames (``["job", queue, job]``) reach application code
only in clients that read push messages on purpose.  ioredis and node-redis
take an unexpected RESP2 array for the reply to their next command, and drop
RESP3 pushes they do not know, while the job stays leased to the connection.
Every Redis client, though, delivers pub/sub messages to a listener once the
application subscribes.  So the channel name *is* the QWORK request, and each
job arrives as ``["message", channel, <job as JSON>]`` on that channel.
The client's own SUBSCRIBE puts it in the state where it expects those
frames; no job is leased before that.

The JSON object holds the job map's fields (``id``, ``payload``, ``lease``,
``deadline``, ``deliveries`` ...) plus ``queue``.  A byte string that is not
UTF-8 (a binary payload) is sent base64-encoded under ``<field>_base64``
instead, so that the message is always valid JSON.
"""

from __future__ import annotations

import base64
import json

from . import errors
from .acl import require_command, require_queue
from .jobs import work_request
from .replies import Frames, Map, Push, Record

WORK = b"QWORK"


def subscribe(client, args):
    """Every channel is checked and resolved before any stream starts: one
    bad channel subscribes none.  A channel that is not a QWORK request is a
    plain one (``daemon/channels.py``)."""
    requests = [_request(client, channel) if is_work(channel) else channel for channel in args[1:]]
    frames = []
    for request in requests:
        if type(request) is bytes:
            client.holdings.listen(request)
            channel = request
        else:
            client.holdings.start_work(request)
            channel = request.channel
        frames.append(Push([b"subscribe", channel, client.holdings.subscriptions]))
    return Frames(frames)


def publish(client, args):
    """PUBLISH channel message: to the plain channel's subscribers now."""
    return client.server.channels.publish(args[1], args[2])


def is_work(channel: bytes) -> bool:
    return channel[:len(WORK) + 1].upper() == WORK + b" "


def unsubscribe(client, args):
    channels = args[1:] or client.holdings.channels()
    if not channels:
        return Push([b"unsubscribe", None, 0])
    frames = []
    for channel in channels:
        if is_work(channel):
            client.holdings.stop_work(channel)
        else:
            client.holdings.stop_listening(channel)
        frames.append(Push([b"unsubscribe", channel, client.holdings.subscriptions]))
    return Frames(frames)


def _request(client, channel: bytes):
    words = channel.split()
    if len(words) < 3:
        raise errors.BAD_WORK_CHANNEL
    if client.server.read_only:          # a work stream leases jobs: a replica's primary does that
        raise errors.READONLY
    require_command(client, "qwork")
    require_queue(client, words[1], "RW")
    return work_request(client, [WORK] + words[1:], channel)


def job_message(job: Record, queue: bytes) -> bytes:
    """A claimed job as the JSON text of its pub/sub message."""
    fields = _json_fields(job.items)
    fields = {"queue": queue.decode(), **fields}
    return json.dumps(fields, separators=(",", ":")).encode()


def _json_fields(items) -> dict:
    """Fields as JSON holds them: bytes as text, or, when they are not
    UTF-8, base64 under the name with ``_base64`` added; a map (``meta``)
    as an object of its fields, by the same rule."""
    fields: dict = {}
    for key, value in items:
        name = key.decode(errors="replace")
        if isinstance(value, bytes):
            try:
                fields[name] = value.decode()
            except UnicodeDecodeError:
                fields[name + "_base64"] = base64.b64encode(value).decode()
        elif isinstance(value, Map):
            fields[name] = _json_fields(value.items)
        else:
            fields[name] = value
    return fields
