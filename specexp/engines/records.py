"""The typed values engines hand their consumers: a launch, a stream's chunk, a setting as
the server ran it, a preflight check, a resolution, a server's load."""

from __future__ import annotations

import shlex
import signal
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Mapping, Optional, Union

from specexp.core.records import History, Record, Version

__all__ = [
    "BatchSchedule",
    "Check",
    "CheckStatus",
    "Engagement",
    "LaunchSpec",
    "PORT",
    "PortSlot",
    "Prompt",
    "Resolution",
    "ServerCommand",
    "ServerLoad",
    "Setting",
    "StreamChunk",
    "ScheduleSetting",
]

# A prompt as text, or as the server's token ids.
Prompt = Union[str, list[int]]


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # only the variables specexp sets; the rest is inherited
    # What the server gets when the process that started it dies (see ServerCommand).
    parent_death_signal: signal.Signals = signal.SIGTERM

    def shell_line(self) -> str:
        """One copy-pasteable shell line: variables, then the quoted command."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join(assignments + [shlex.join(self.argv)])


class PortSlot(Enum):
    """Where a server's command names the port it listens on, which each launch leases."""

    port = "port"


PORT = PortSlot.port


@dataclass(frozen=True)
class ServerCommand:
    """A server's command, built once per job from its settings: everything but the port
    (:data:`PORT` in ``argv``), the one thing that differs between its launches."""

    argv: tuple[Union[str, PortSlot], ...]
    env: Mapping[str, str]  # only the variables specexp sets; the rest is inherited
    # The signal the server gets when the process that started it dies, even by SIGKILL. The
    # kernel sends it again as each further thread of that process exits, so the server must
    # take it repeated: SIGTERM where a second one is harmless, SIGKILL where it is not.
    parent_death_signal: signal.Signals = signal.SIGTERM

    @property
    def program(self) -> str:
        return str(self.argv[0])

    def at(self, port: int) -> LaunchSpec:
        """One launch of the command, listening on ``port``."""
        return LaunchSpec(
            [str(port) if isinstance(a, PortSlot) else a for a in self.argv],
            dict(self.env),
            self.parent_death_signal,
        )


@dataclass
class StreamChunk:
    """What one server-sent event contributed to a streamed completion."""

    # Output tokens so far as the server counts them (cumulative), when it says.
    tokens_so_far: Optional[int] = None
    # Tokens in this event, when the server gives per-event counts instead.
    tokens_in_chunk: Optional[int] = None
    done: bool = False
    # The text this event carried (outputs are compared across arms by it), or the whole
    # text so far where the server streams it so (SGLang).
    text: str = ""
    text_so_far: Optional[str] = None
    # Final figures from the server: completion_tokens, why it stopped ("finish": "eos",
    # "length" or the engine's own word) and speculative statistics.
    final: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchSchedule:
    """Draft tokens by batch size (requests in a step): inclusive ranges (first, last, draft
    tokens) covering 1..max_batch in order, 0 drafting nothing. The form every engine's own
    setting is written from: a switch-off is two ranges, a draft-length schedule one a level."""

    ranges: tuple[tuple[int, int, int], ...]

    def __post_init__(self) -> None:
        expected = 1
        for first, last, tokens in self.ranges:
            if first != expected or last < first or tokens < 0:
                raise ValueError(
                    f"a batch schedule's ranges run from 1 without gaps, each first <= last and "
                    f"its draft tokens >= 0: {list(self.ranges)}"
                )
            expected = last + 1
        if not self.ranges:
            raise ValueError("a batch schedule needs at least one range")

    @classmethod
    def switch_off(cls, threshold: int, draft_tokens: int, max_batch: int) -> BatchSchedule:
        """``draft_tokens`` below ``threshold`` requests, none from it up to ``max_batch``."""
        drafting = ((1, threshold - 1, draft_tokens),) if threshold > 1 else ()
        return cls((*drafting, (threshold, max(threshold, max_batch), 0)))

    @property
    def max_batch(self) -> int:
        return self.ranges[-1][1]

    @property
    def longest(self) -> int:
        return max(tokens for _, _, tokens in self.ranges)

    def draft_tokens(self, batch: int) -> int:
        """The draft tokens at ``batch`` requests (the last range's beyond max_batch)."""
        return next((t for _, last, t in self.ranges if batch <= last), self.ranges[-1][2])

    def describe(self) -> str:
        return ", ".join(
            f"{first}-{last}: {f'{tokens} draft tokens' if tokens else 'off'}"
            for first, last, tokens in self.ranges
        )


@dataclass(frozen=True)
class ScheduleSetting:
    """A batch schedule (a switch-off is one) in an engine's own terms: what to merge into
    its speculative config, the flags to add, the files they name (by name), for an engine
    with no setting that changes with load the launch flags of the server to run for each
    batch-size range ("1-7"), where the form was read, and how to use it. Nothing but the
    note: the engine cannot take it, and the note says why."""

    note: str
    speculative_config: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    files: dict[str, Any] = field(default_factory=dict)
    launches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""

    @property
    def exported(self) -> bool:
        return bool(self.speculative_config or self.flags or self.files or self.launches)


class Engagement(StrEnum):
    engaged = "engaged"
    not_engaged = "not engaged"
    unknown = "unknown"


@dataclass(frozen=True)
class Setting(Record):
    """One requested setting as the live server ran it, with the evidence."""

    HISTORY = History(
        "effective setting",
        (Version(1, "the setting as the live server ran it: requested, actual, status, evidence"),),
    )

    requested: str
    actual: str
    status: Engagement
    evidence: str


class CheckStatus(StrEnum):
    passed = "pass"
    failed = "fail"
    skipped = "skip"
    noted = "note"  # nothing wrong, something to know


@dataclass(frozen=True)
class Check:
    """One preflight check: passed, failed with a fix hint, or skipped with its reason."""

    name: str
    status: CheckStatus
    detail: str


@dataclass(frozen=True)
class Resolution:
    """What the engine's own resolution does to one launch's settings before serving."""

    changed: tuple[str, ...] = ()
    filled: tuple[str, ...] = ()
    # Why the resolution could not be run (its interpreter's last word); None when it ran.
    error: Optional[str] = None
    # Settings the engine chooses by itself where the command leaves them to it (setting ->
    # value), from its own code for the declared hardware, and what that was.
    chosen: tuple[tuple[str, str], ...] = ()
    chosen_for: str = ""
    ran: bool = True  # False: only the choices were predicted


@dataclass(frozen=True)
class ServerLoad:
    """What a server is working on, as its own endpoints say: requests running and waiting.
    Read through the server's own request loop (llama.cpp answers /metrics and /slots from
    it), so an idle reading also means the work after the last request is done."""

    running: float
    waiting: float

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0

    def describe(self) -> str:
        return f"{self.running:.0f} request(s) running, {self.waiting:.0f} waiting"
