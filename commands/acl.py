"""Users and what each may do: Redis's ACL rules, applied to queues
(docs/operations.md, "Users and permissions"; docs/semantics.md §7).

A user is declared in the config file with Redis's syntax, one ``user``
line each::

    user worker on >secret ~jobs:* +qclaim +qack +qnack +qextend
    user app on #<sha256 hex> ~* +@all

Rules apply left to right:

``on`` / ``off``          the user may (not) authenticate
``>pw`` / ``<pw``         add / remove a password (kept only as its SHA-256)
``#hex`` / ``!hex``       add / remove a password by its SHA-256 hex digest
``nopass`` / ``resetpass``  any password works / forget every password
``~glob``                 queues whose names match may be used (Redis glob)
``%R~glob`` ``%W~glob``   ... only by commands that read / that write
``allkeys`` / ``resetkeys``  ``~*`` / no queue at all
``+cmd`` / ``-cmd``       allow / forbid a command (``+client|kill``: one
                          subcommand)
``+@cat`` / ``-@cat``     allow / forbid a category (``ACL CAT`` lists them)
``allcommands`` / ``nocommands``  ``+@all`` / ``-@all``
``reset``                 back to a new user: off, no password, no queue,
                          no command
``&glob`` ``allchannels`` ``resetchannels`` ``sanitize-payload``
                          accepted for Redis configs and ignored: leaseq
                          has no channels and no payload restore

A new user starts with nothing (off, no password, no queue, no command).
The default user, unless the file declares it, is ``on nopass ~* +@all``;
``requirepass`` replaces its passwords with that one.

Categories come from the command table's flags, as Redis derives them:
``write``/``read``/``fast``/``slow``/``blocking``/``admin`` from the flags,
``connection`` and ``transaction`` from the group, ``queue`` for every
command that names a queue, plus ``keyspace`` and ``dangerous`` where the
table says so.  A queue pattern applies to every queue a command names: the
first argument here, and QREDRIVE's targets and a DEADLETTER queue in their
handlers (``require_queue``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

from . import errors
from .glob import compile_glob
from .replies import Error

# Redis's names where Redis has the category; "queue" is leaseq's data type
CATEGORIES = {
    "keyspace": "queue lifecycle and listing, independent of the jobs in them",
    "read": "reads jobs or queues",
    "write": "changes jobs or queues",
    "queue": "names a queue (the counterpart of Redis's data-type categories)",
    "admin": "administration: configuration, snapshots, shutdown, debugging",
    "fast": "O(1) or O(log n)",
    "slow": "every command that is not fast",
    "blocking": "may wait (QCLAIM BLOCK, QRESULT BLOCK)",
    "dangerous": "admin commands and those that delete many jobs or reveal other clients",
    "connection": "about the connection itself",
    "transaction": "MULTI, EXEC, DISCARD, WATCH",
}

_FLAG_CATEGORIES = {"write": "write", "readonly": "read", "fast": "fast", "blocking": "blocking",
                    "admin": "admin"}
_GROUP_CATEGORIES = {"connection": "connection", "transactions": "transaction"}


def categories_for(flags: frozenset, group: str, names_queue: bool, extra: tuple = ()) -> frozenset:
    """A command's (or subcommand's) ACL categories, from the table."""
    cats = {_FLAG_CATEGORIES[f] for f in flags if f in _FLAG_CATEGORIES}
    if "fast" not in flags:
        cats.add("slow")
    if group in _GROUP_CATEGORIES:
        cats.add(_GROUP_CATEGORIES[group])
    if names_queue:
        cats.add("queue")
    if "admin" in flags:
        cats.add("dangerous")
    cats.update(extra)
    return frozenset(cats)


def password_hash(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


_HEX64 = re.compile(r"[0-9a-f]{64}")


class AclError(ValueError):
    """A rule that cannot be applied; the message is Redis's wording."""


class Units:
    """What rules switch on and off: each command, or each subcommand of the
    commands that have them (``client|kill``), with its categories."""

    def __init__(self, table: dict) -> None:
        self.categories: dict[str, frozenset] = {}
        self.of_command: dict[str, tuple[str, ...]] = {}
        for cmd in table.values():
            if cmd.subcommands:
                names = tuple(f"{cmd.name}|{sub.name}" for sub in cmd.subcommands)
                for sub, unit in zip(cmd.subcommands, names):
                    self.categories[unit] = sub.categories
            else:
                names = (cmd.name,)
                self.categories[cmd.name] = cmd.categories
            self.of_command[cmd.name] = names
        self.all = frozenset(self.categories)

    def in_category(self, category: str) -> frozenset:
        if category == "all":
            return self.all
        if category not in CATEGORIES:
            raise AclError("Unknown command or category name in ACL")
        return frozenset(u for u, cats in self.categories.items() if category in cats)

    def named(self, name: str) -> frozenset:
        if name in self.of_command:
            return frozenset(self.of_command[name])
        if name in self.categories:          # cmd|sub
            return frozenset((name,))
        raise AclError("Unknown command or category name in ACL")


@dataclass
class QueuePattern:
    text: str                 # as written, for ACL LIST
    read: bool
    write: bool

    def __post_init__(self) -> None:
        glob = self.text.split("~", 1)[1]
        self.matches = compile_glob(glob.encode())


@dataclass(slots=True)
class User:
    name: str
    units: Units
    enabled: bool = False
    nopass: bool = False
    hashes: list = field(default_factory=list)           # SHA-256 hex digests, in order added
    patterns: list = field(default_factory=list)         # QueuePattern
    allowed: set = field(default_factory=set)            # units
    command_rules: list = field(default_factory=list)    # since the last reset of the commands, for ACL LIST
    all_commands_base: bool = False                      # that reset was +@all (else -@all)
    unrestricted: bool = False                           # every command on every queue: no checks
    _decided: dict = field(default_factory=dict, repr=False)   # queue name -> (read, write), cached

    # -- rules ------------------------------------------------------------------

    def apply(self, rule: str) -> None:
        """Apply one rule; raises ``AclError`` and changes nothing on a bad one."""
        lowered = rule.lower()
        simple = _SIMPLE_RULES.get(lowered)
        if simple is not None:
            simple(self)
        elif rule[:1] in (">", "<", "#", "!"):
            self._password_rule(rule)
        elif rule[:1] == "~" or rule[:1] == "%":
            self._pattern_rule(rule)
        elif rule[:1] == "&":
            pass                                              # channels: leaseq has none
        elif rule[:1] in ("+", "-") and len(rule) > 1:
            self._command_rule(rule[0], lowered[1:])
        elif rule[:1] == "(":
            raise AclError("selectors are not supported by leaseq")
        else:
            raise AclError("Syntax error")
        self._decided.clear()
        self.unrestricted = self.allowed == self.units.all and self.all_queues()

    def _password_rule(self, rule: str) -> None:
        kind, value = rule[0], rule[1:]
        if kind in "#!":
            if not _HEX64.fullmatch(value):
                raise AclError("The password hash must be exactly 64 characters and contain only "
                               "lowercase hexadecimal characters")
            digest = value
        else:
            digest = password_hash(value.encode())
        if kind in ">#":
            if digest not in self.hashes:
                self.hashes.append(digest)
            self.nopass = False
        elif digest in self.hashes:
            self.hashes.remove(digest)
        else:
            raise AclError("The password you are trying to remove from the user does not exist")

    def _pattern_rule(self, rule: str) -> None:
        if rule[0] == "%":
            flags, sep, _glob = rule[1:].partition("~")
            if not sep or not flags or set(flags.upper()) - {"R", "W"}:
                raise AclError("Syntax error")
            read, write = "R" in flags.upper(), "W" in flags.upper()
        else:
            read = write = True
        if self.all_queues() and read and write:
            raise AclError("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and "
                           "does not have any effect. Try 'resetkeys' to start with an empty list of patterns")
        self.patterns.append(QueuePattern(rule, read, write))

    def _command_rule(self, sign: str, name: str) -> None:
        units = self.units.in_category(name[1:]) if name[:1] == "@" else self.units.named(name)
        if sign == "+":
            self.allowed |= units
        else:
            self.allowed -= units
        if name == "@all":
            self.command_rules = []
            self.all_commands_base = sign == "+"
        else:
            self.command_rules.append(sign + name)

    def reset_commands(self, allow_all: bool) -> None:
        self._command_rule("+" if allow_all else "-", "@all")

    def reset(self) -> None:
        self.enabled = self.nopass = False
        self.hashes.clear()
        self.patterns.clear()
        self.reset_commands(False)

    # -- questions ----------------------------------------------------------------

    def all_queues(self) -> bool:
        return any(p.read and p.write and p.text in ("~*", "%RW~*", "%WR~*") for p in self.patterns)

    def password_ok(self, password: bytes) -> bool:
        if self.nopass:
            return True
        digest = password_hash(password)
        # compare against every hash, so the time does not tell which one matched
        return sum(hmac.compare_digest(digest, h) for h in self.hashes) > 0

    def may_run(self, unit: str) -> bool:
        return unit in self.allowed

    def queue_access(self, name: bytes) -> tuple[bool, bool]:
        """(may read, may write) the queue ``name``."""
        decided = self._decided.get(name)
        if decided is None:
            read = any(p.read and p.matches(name) for p in self.patterns)
            write = any(p.write and p.matches(name) for p in self.patterns)
            if len(self._decided) > 4096:
                self._decided.clear()
            decided = self._decided[name] = (read, write)
        return decided

    def describe(self) -> str:
        """The ``ACL LIST`` line: hashes, never passwords."""
        parts = ["user", self.name, "on" if self.enabled else "off"]
        if self.nopass:
            parts.append("nopass")
        parts += ["#" + h for h in self.hashes]
        parts += [p.text for p in self.patterns]
        parts.append("resetchannels")
        parts.append("+@all" if self.all_commands_base else "-@all")
        parts += self.command_rules
        return " ".join(parts)


def _on(user: User) -> None:
    user.enabled = True


def _off(user: User) -> None:
    user.enabled = False


def _nopass(user: User) -> None:
    user.hashes.clear()
    user.nopass = True


def _resetpass(user: User) -> None:
    user.hashes.clear()
    user.nopass = False


def _allkeys(user: User) -> None:
    user.patterns[:] = [QueuePattern("~*", True, True)]


def _resetkeys(user: User) -> None:
    user.patterns.clear()


def _ignored(user: User) -> None:
    """Redis rules about channels and payload checks: nothing here to apply."""


_SIMPLE_RULES = {
    "on": _on,
    "off": _off,
    "nopass": _nopass,
    "resetpass": _resetpass,
    "allkeys": _allkeys,
    "resetkeys": _resetkeys,
    "allcommands": lambda user: user.reset_commands(True),
    "nocommands": lambda user: user.reset_commands(False),
    "allchannels": _ignored,
    "resetchannels": _ignored,
    "sanitize-payload": _ignored,
    "skip-sanitize-payload": _ignored,
    "reset": lambda user: user.reset(),
}


# -- the users ------------------------------------------------------------------------

DEFAULT_RULES = ("on", "nopass", "~*", "+@all")


class Acl:
    """Every user by name; built once from the config file's ``user`` lines
    and ``requirepass`` (again when CONFIG SET changes requirepass)."""

    def __init__(self, table: dict, declarations=(), requirepass: str = "") -> None:
        self.units = Units(table)
        self.users: dict[str, User] = {}
        self.users["default"] = self._user("default", DEFAULT_RULES)
        for words in declarations:
            name, rules = words[0], words[1:]
            self.users[name] = self._user(name, rules)
        if requirepass:
            default = self.users["default"]
            default.apply("resetpass")
            default.apply(">" + requirepass)

    def _user(self, name: str, rules) -> User:
        user = User(name, self.units)
        for rule in rules:
            user.apply(rule)
        return user

    @property
    def default(self) -> User:
        return self.users["default"]

    @property
    def auth_required(self) -> bool:
        """New connections start unauthenticated unless the default user is
        on and needs no password (Redis's rule)."""
        d = self.default
        return not (d.enabled and d.nopass)

    def authenticate(self, name: bytes, password: bytes) -> User | None:
        user = self.users.get(name.decode(errors="replace"))
        if user is None or not user.enabled or not user.password_ok(password):
            return None
        return user


def check_rules(words: list[str], table: dict) -> None:
    """Validate one ``user name rule ...`` declaration (config loading);
    raises ``AclError`` naming the rule."""
    if not words:
        raise AclError("'user' needs a user name")
    user = User(words[0], Units(table))
    for rule in words[1:]:
        try:
            user.apply(rule)
        except AclError as e:
            raise AclError(f"Error loading ACL rule '{rule}' for the user named '{words[0]}': {e}") from None


# -- the checks the dispatcher and handlers make -------------------------------------

def unit_of(cmd, args: list) -> str | None:
    """The unit a request runs: the command, or ``cmd|sub``; None for a
    subcommand the command does not have (its handler answers that)."""
    if not cmd.subcommands:
        return cmd.name
    sub = args[1].decode(errors="replace").lower() if len(args) > 1 else ""
    unit = f"{cmd.name}|{sub}"
    return unit if any(s.name == sub for s in cmd.subcommands) else None


def command_refusal(user: User, cmd, args: list) -> Error | None:
    """-NOPERM for a command (or subcommand) the user may not run; None when
    allowed.  A subcommand the command does not have passes, if the user may
    run some of the command: its handler answers it."""
    unit = unit_of(cmd, args)
    if unit is None:
        if not any(user.may_run(u) for u in user.units.of_command[cmd.name]):
            return errors.noperm_command(user.name, cmd.name)
    elif not user.may_run(unit):
        return errors.noperm_command(user.name, unit)
    return None


def queues_named(cmd, args: list) -> list:
    """The queue arguments of a request, from the table's key positions."""
    if not cmd.first_key or len(args) <= cmd.first_key:
        return []
    if cmd.last_key == -1:
        return args[cmd.first_key:]
    return [args[cmd.first_key]]


def queue_refusal(user: User, name: bytes, access: str) -> Error | None:
    """-NOPERM when the user may not use queue ``name`` as ``access`` (R, W
    or RW: the command's ``access`` in the table) needs."""
    read, write = user.queue_access(name)
    if ("R" in access and not read) or ("W" in access and not write):
        return errors.noperm_queue(user.name, name)
    return None


def require_queue(client, name: bytes, access: str = "W") -> None:
    """A handler's check of another queue its command names (QREDRIVE's
    targets, a DEADLETTER queue, the queue of a SUBSCRIBE "QWORK ..."): by
    default the user must be able to write it."""
    user = client.acl_user
    if user.unrestricted:
        return
    denied = queue_refusal(user, name, access)
    if denied is not None:
        client.server.stats.acl_access_denied_key += 1
        raise denied


def require_command(client, unit: str) -> None:
    """A handler's check that the user may run the command it stands for
    (SUBSCRIBE "QWORK ..." runs QWORK)."""
    user = client.acl_user
    if not user.unrestricted and not user.may_run(unit):
        client.server.stats.acl_access_denied_cmd += 1
        raise errors.noperm_command(user.name, unit)


# -- ACL ---------------------------------------------------------------------------------

ACL_HELP = [
    b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CAT [<category>]", b"    List all commands that belong to <category>, or all command categories",
    b"    when no category is specified.",
    b"LIST", b"    Show users' rules in the config file format (password hashes, never passwords).",
    b"USERS", b"    List all the user names.",
    b"WHOAMI", b"    Return the current connection username.",
    b"HELP", b"    Print this help.",
    b"Users are declared in the config file ('user' lines); leaseq has no ACL SETUSER.",
]


def acl_cmd(client, args):
    sub = args[1].upper()
    n = len(args)
    acl = client.server.acl
    if sub == b"WHOAMI" and n == 2:
        return client.user.encode()
    if sub == b"USERS" and n == 2:
        return [name.encode() for name in sorted(acl.users)]
    if sub == b"LIST" and n == 2:
        return [acl.users[name].describe().encode() for name in sorted(acl.users)]
    if sub == b"CAT" and n == 2:
        return [c.encode() for c in CATEGORIES]
    if sub == b"CAT" and n == 3:
        category = args[2].decode(errors="replace").lower()
        if category not in CATEGORIES:
            raise errors.unknown_category(args[2])
        units = acl.units.in_category(category)
        return [u.encode() for u in sorted(units)]
    if sub == b"HELP" and n == 2:
        return ACL_HELP
    if sub in (b"WHOAMI", b"USERS", b"LIST", b"CAT", b"HELP"):
        raise errors.subcommand_arity("acl", sub)
    raise errors.unknown_subcommand(args[1], "acl")
