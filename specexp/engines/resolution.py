"""An engine's own resolution of a command, run without serving: what it would change or
fill in of the settings a launch gives, and what it would choose by itself where the
command leaves a setting to it. Both are capabilities an engine may have; this module owns
what it needs of one that has them."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from typing import Any, Optional, Protocol, runtime_checkable

from specexp.core.schemas.engine import ServerSettings
from specexp.engines.records import Engagement, LaunchSpec, Resolution, ServerCommand, Setting
from specexp.engines.stack import last_line, run_with_stack_env

__all__ = [
    "ChoosingEngine",
    "ResolvingEngine",
    "live_resolution",
    "predicted_resolution",
    "resolutions_from",
    "resolve",
]


@runtime_checkable
class ResolvingEngine(Protocol):
    """An engine with a resolution-only mode: its own code fills in or overrides the parsed
    settings, and says what it resolved."""

    def resolution_command(
        self, server: ServerSettings[Any], launches: list[LaunchSpec]
    ) -> list[str]:
        """A command that runs the engine's own resolution of each launch's settings without
        serving, and prints a JSON list with one object of resolved settings per launch."""
        ...

    def rewrites(self, launch: LaunchSpec, resolved: dict[str, Any]) -> tuple[list[str], list[str]]:
        """What the resolution (``resolved``: from ``resolution_command`` or the live server)
        changed of the launch's settings, and what it filled in that the launch left unset."""
        ...


@runtime_checkable
class ChoosingEngine(Protocol):
    """An engine whose own choices (an attention backend the command leaves on auto) can be
    predicted from its code for the declared hardware."""

    def predicted_choices(
        self, server: ServerSettings[Any], launches: list[LaunchSpec]
    ) -> Optional[tuple[list[dict[str, str]], str]]:
        """What the engine would choose for each launch, with what was declared; None where
        it cannot be predicted here."""
        ...


def resolve(
    engine: ResolvingEngine, server: ServerSettings[Any], launches: list[LaunchSpec]
) -> Optional[list[Resolution]]:
    """The engine's own resolution of each launch, run in the stack's interpreter; None when
    the stack has no interpreter here."""
    command = engine.resolution_command(server, launches)
    if not os.access(command[0], os.X_OK):
        return None
    return resolutions_from(engine, launches, run_with_stack_env(server, command))


def resolutions_from(
    engine: ResolvingEngine, launches: list[LaunchSpec], out: subprocess.CompletedProcess
) -> list[Resolution]:
    """Each launch's resolution from how ``resolution_command`` ended (``out``)."""
    if out.returncode != 0:
        return [Resolution(error=last_line(out.stderr))] * len(launches)
    resolved = json.loads(out.stdout.strip().splitlines()[-1])
    rewrites = [
        engine.rewrites(launch, settings)
        for launch, settings in zip(launches, resolved, strict=True)
    ]
    return [Resolution(tuple(changed), tuple(filled)) for changed, filled in rewrites]


def live_resolution(
    engine: ResolvingEngine, command: ServerCommand, resolved: dict[str, Any], evidence: str
) -> Setting:
    """The live server's resolved settings (``resolved``, as ``rewrites`` reads them) against
    the job's command: engaged when it changed none."""
    changed, _ = engine.rewrites(command.at(0), resolved)
    return Setting(
        "as composed",
        "; ".join(changed) or "as composed",
        Engagement.not_engaged if changed else Engagement.engaged,
        evidence,
    )


def predicted_resolution(
    engine: object, server: ServerSettings[Any], launch: LaunchSpec
) -> Optional[Resolution]:
    """What the engine's own resolution would do to ``launch`` and what it would choose by
    itself, as far as it can be run or predicted here (the dry run shows it); None when
    neither can."""
    resolved = resolve(engine, server, [launch]) if isinstance(engine, ResolvingEngine) else None
    resolution = resolved[0] if resolved else None
    predicted = (
        engine.predicted_choices(server, [launch]) if isinstance(engine, ChoosingEngine) else None
    )
    if predicted is None:
        return resolution
    (choices,), basis = predicted
    return dataclasses.replace(
        resolution or Resolution(ran=False),
        chosen=tuple(sorted(choices.items())),
        chosen_for=basis,
    )
