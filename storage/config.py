"""A queue's options (``QueueConfig``) and the values they may take."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

FSYNC, ASYNC, MEMORY = "fsync", "async", "memory"
DURABILITIES = (FSYNC, ASYNC, MEMORY)

LEASE_MIN, LEASE_MAX = 100, 86_400_000


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A queue's options (docs/semantics.md §3.1); the log stores them as JSON."""

    lease: int = 30_000
    maxdeliveries: int = 0
    deadletter: str | None = None
    backoff: tuple = (1000, 2.0, 1000)
    maxlen: int = 0
    expire: int = 0
    retain_completed: int = 0
    retain_dead: int = 604_800_000
    result_ttl: int = 3_600_000   # RESULT-TTL: how long a job's result (QACK ... RESULT) is kept; 0: none
    window: int = 0
    durability: str = FSYNC
    rate: tuple = (0, 0)          # (n, ms): at most n jobs handed out in any ms; (0, 0): no limit
    concurrency: int = 0          # at most this many jobs in flight; 0: no limit
    paused: bool = False          # QPAUSE: claims hand out nothing (kept with the options, so it lasts)
    group_concurrency: int = 0    # at most this many slots held per group; 0: no limit
    group_rate: tuple = (0, 0)    # (n, ms) per group, as rate
    paused_groups: frozenset = frozenset()   # QPAUSE queue GROUP g: these groups hand out nothing

    # Whether a rule of the queue's own limits what claims take (a pause,
    # CONCURRENCY, RATE): read at every claim, so worked out once (the
    # options never change in place: QCONFIG SET makes new ones).
    limited: bool = field(init=False, repr=False, compare=False)
    # Whether a job ending frees a slot someone may wait for (CONCURRENCY,
    # GROUP-CONCURRENCY): read at every ack, so worked out once too.
    slots: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "limited", bool(self.paused or self.concurrency or self.rate[0]))
        object.__setattr__(self, "slots", bool(self.concurrency or self.group_concurrency))

    @property
    def grouped(self) -> bool:
        """Whether a group rule is set (the queue then keeps its groups)."""
        return bool(self.group_concurrency or self.group_rate[0] or self.paused_groups)

    def to_json(self) -> dict:
        d = asdict(self)
        del d["limited"], d["slots"]
        d["backoff"] = list(self.backoff)
        d["rate"] = list(self.rate)
        d["group_rate"] = list(self.group_rate)
        # group names are any bytes: kept as latin-1 text, which maps each byte to one character
        d["paused_groups"] = sorted(g.decode("latin-1") for g in self.paused_groups)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "QueueConfig":
        known = {f.name for f in fields(cls) if f.init}
        values = {k: v for k, v in d.items() if k in known}
        if "backoff" in values:
            b = values["backoff"]
            values["backoff"] = (int(b[0]), float(b[1]), int(b[2]))
        if "rate" in values:
            values["rate"] = (int(values["rate"][0]), int(values["rate"][1]))
        if "group_rate" in values:
            values["group_rate"] = (int(values["group_rate"][0]), int(values["group_rate"][1]))
        if "paused_groups" in values:
            values["paused_groups"] = frozenset(g.encode("latin-1") for g in values["paused_groups"])
        return cls(**values)

    def same_options(self, other: "QueueConfig") -> bool:
        """Equal but for the pauses (QCREATE of a paused queue with its own
        options is still +OK)."""
        return (replace(self, paused=False, paused_groups=frozenset())
                == replace(other, paused=False, paused_groups=frozenset()))

    def with_options(self, **changes) -> "QueueConfig":
        return replace(self, **changes)
