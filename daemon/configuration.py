"""The daemon's settings while it runs: CONFIG GET, SET and REWRITE
(docs/operations.md, "Settings").

``daemon/config.py`` says what the settings are and checks a change;
this part applies an accepted change to what holds a copy of a setting
(the users, each connection's parser and output limit, the store's and
the data directory's copies, the log level, the replication rules), and
writes the settings and the role to the config file the daemon was
started with."""

from __future__ import annotations

import logging

from leaseq.commands import errors
from leaseq.commands.acl import Acl
from leaseq.commands.table import TABLE

from . import config

log = logging.getLogger(__name__)


class Configuration:
    __slots__ = ("server", "file")

    def __init__(self, server, file: str | None) -> None:
        self.server = server
        self.file = file                 # what CONFIG REWRITE writes (None: started without one)

    def items(self) -> list[tuple[str, str]]:
        """CONFIG GET: every setting by name, rendered as text."""
        return config.items(self.server.settings)

    def set(self, pairs: list[tuple[str, str]]) -> None:
        """CONFIG SET: all of ``pairs`` or none (``config.apply_set`` checks
        them and raises the error reply), then every copy follows."""
        server = self.server
        s, changes = config.apply_set(server.settings, pairs)
        server.settings = s
        if "requirepass" in changes:        # Redis: requirepass is the default user's password
            server.acl = Acl(TABLE, s.users, s.requirepass)
        if server.datadir is not None:
            config.copy_to_storage(s, server.store, server.datadir)
        for c in list(server.clients.values()):
            c.parser.max_args = s.max_args
            c.parser.max_bulk = s.proto_max_bulk_len
            if "client_output_buffer_limit" in changes:
                c.limit_output()
        if "loglevel" in changes:
            logging.getLogger("leaseq").setLevel(s.loglevel.upper())
        server.slowlog.configure(s)
        server.replication_rules()
        server.replication.replicas.acked()           # (a smaller min-replicas-to-ack may let replies go now)

    def rewrite(self) -> None:
        """CONFIG REWRITE: the settings now, and the role now (``replicaof``),
        into the config file the daemon was started with."""
        if not self.file:
            raise errors.NO_CONFIG_FILE
        master = self.server.replication.master
        try:
            config.rewrite(self.file, self.server.settings, f"{master[0]} {master[1]}" if master else "")
        except OSError as e:
            log.error("CONFIG REWRITE failed: %s", e)
            raise errors.rewrite_failed(e) from None
        log.info("CONFIG REWRITE wrote %s", self.file)
