"""The files observer: a job's output directory written from its events - the resolved
config, the server's real command, the environment, every request (appended between runs),
every launch measured whole (appended as it ends), how each setting ran, the prompts and the
speculation profile - with an earlier attempt's files set aside first and credentials kept
out of every file."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable, Optional

from omegaconf import OmegaConf

from specexp.analysis.results import Artifact
from specexp.core.durable import append_whole, write_atomic
from specexp.core.measurements import RunResult
from specexp.core.redaction import redact_env, redact_text, redact_tree
from specexp.core.schemas.run import RunConfig
from specexp.engines.records import LaunchSpec, Setting
from specexp.run.events import (
    JobClosed,
    JobEvent,
    JobFinished,
    JobOpened,
    LaunchesTakenBack,
    LaunchMeasured,
    RunMeasured,
    ServerStarting,
    SettingsReadBack,
)
from specexp.run.launches import CompletedLaunch

# The files a job's own observers write (those the MLflow observer logs at the job's end).
JOB_FILES = (
    Artifact.config,
    Artifact.command,
    Artifact.environment,
    Artifact.requests,
    Artifact.prompts,
    Artifact.speculation_profile,
)

# Where a tracked job's output directory says which run it is (the MLflow observer writes
# it, specexp.api.load reads it).
RUN_FILE = "run.json"


def redacted_config(cfg: RunConfig) -> dict:
    """The config as plain data, with secret-looking environment values replaced."""
    data = json.loads(json.dumps(dataclasses.asdict(cfg)))  # enums become their values
    for group in ("stack", "engine"):
        data[group]["env"] = redact_env(data[group]["env"])
    return redact_tree(data)


def redact_file(path: Path) -> None:
    """Credentials in URLs out of a server's log before it is copied anywhere. Rewritten only
    when it holds some; a server still running appends after (its log is opened to append)."""
    if not path.exists():
        return
    text = path.read_text(errors="replace")
    redacted = redact_text(text)
    if redacted != text:
        path.write_text(redacted)


def set_aside_earlier_attempt(output_dir: Path) -> Optional[Path]:
    """The files an earlier attempt of this job left in ``output_dir`` (it was killed, and
    a resumed sweep runs it again in its place), moved whole into ``attempt-N/`` there, its
    ``run.json`` (which run they are) with them: never written over or appended to. Where
    they went, if anywhere."""
    earlier = [output_dir / a for a in Artifact if (output_dir / a).exists()]
    if earlier and (output_dir / RUN_FILE).exists():
        earlier.append(output_dir / RUN_FILE)
    if not earlier:
        return None
    number = 1
    while (output_dir / f"attempt-{number}").exists():
        number += 1
    aside = output_dir / f"attempt-{number}"
    aside.mkdir()
    for path in earlier:
        path.rename(aside / path.name)
    return aside


class FilesObserver:
    """Writes a job's files into its output directory as its events come; ``say`` tells the
    user where an earlier attempt's files went."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.output_dir: Optional[Path] = None
        self._fingerprint = ""
        self._aside: Optional[Path] = None
        self._command_written = False
        # The launch under way: its runs with where their energy was read, and how the
        # job's settings ran by its end - its line of launches.jsonl once it is measured.
        self._launch_runs: list[tuple[RunResult, Optional[str]]] = []
        self._effective: dict[str, Setting] = {}
        self._handlers: dict[type, Callable[[Any], None]] = {
            JobOpened: self._opened,
            LaunchesTakenBack: self._taken_back,
            ServerStarting: self._starting,
            RunMeasured: self._run,
            SettingsReadBack: self._settings,
            LaunchMeasured: self._launch,
            JobFinished: self._finished,
            JobClosed: self._closed,
        }

    def notify(self, event: JobEvent) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _path(self, artifact: Artifact) -> Path:
        assert self.output_dir is not None, "a job's events begin with JobOpened"
        return self.output_dir / artifact

    def _opened(self, event: JobOpened) -> None:
        self.output_dir = event.output_dir
        self._fingerprint = event.job.config_fingerprint()
        aside = self._aside = set_aside_earlier_attempt(event.output_dir)
        if aside:
            self.say(f"an earlier attempt's files in {event.output_dir} are kept in {aside}")
        write_atomic(
            self._path(Artifact.config),
            OmegaConf.to_yaml(OmegaConf.create(redacted_config(event.job.config))),
        )
        write_atomic(
            self._path(Artifact.environment),
            json.dumps(
                {
                    "set_by_specexp": redact_env(dict(event.job.command.env)),
                    "inherited": redact_env(dict(os.environ)),
                },
                indent=2,
                sort_keys=True,
            ),
        )

    def _starting(self, event: ServerStarting) -> None:
        """The command of the job's first server, as it was launched (once per job)."""
        if self._command_written:
            return
        write_atomic(
            self._path(Artifact.command),
            redact_text(
                f"# not started by specexp: measured the running server at {event.url}\n"
                if event.command is None
                else LaunchSpec(event.command.argv, redact_env(event.command.env)).shell_line()
                + "\n"
            ),
        )
        self._command_written = True

    def _taken_back(self, event: LaunchesTakenBack) -> None:
        self.say(
            f"{event.launches} launch(es) the earlier attempt completed taken back from "
            f"{self._aside}: only the missing ones are measured"
        )

    def _run(self, event: RunMeasured) -> None:
        records = event.result.records
        append_whole(
            self._path(Artifact.requests), (json.dumps(r.to_json()) + "\n" for r in records)
        )
        self._launch_runs.append((event.result, event.energy_source))

    def _launch(self, event: LaunchMeasured) -> None:
        """The launch's line, appended whole: a unit a resumed sweep takes back."""
        runs = [(r, e) for r, e in self._launch_runs if r.launch == event.launch_index]
        self._launch_runs = []
        launch = CompletedLaunch(
            self._fingerprint,
            event.launch_index,
            event.wall_s,
            [r for r, _ in runs],
            [e for _, e in runs],
            self._effective,
        )
        append_whole(self._path(Artifact.launches), [json.dumps(launch.to_json()) + "\n"])

    def _settings(self, event: SettingsReadBack) -> None:
        self._effective = dict(event.effective)
        write_atomic(
            self._path(Artifact.effective),
            json.dumps(
                {k: s.to_json() for k, s in event.effective.items()}, indent=2, sort_keys=True
            ),
        )

    def _finished(self, event: JobFinished) -> None:
        if event.summary.prompts:
            write_atomic(
                self._path(Artifact.prompts), json.dumps(event.summary.prompts.to_json(), indent=1)
            )
        if event.speculation_profile is not None:
            write_atomic(
                self._path(Artifact.speculation_profile),
                json.dumps(event.speculation_profile, indent=1),
            )

    def _closed(self, event: JobClosed) -> None:
        for log in event.server_logs:
            redact_file(log)
