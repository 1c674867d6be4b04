"""What a job prepares before it starts: only what its server will load."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from specexp.core.schemas import ConfigError
from specexp.run import session
from specexp.run.events import Emitter, JobEvent, Preparing
from tests.conftest import compose_job


@pytest.mark.parametrize(("method", "writes"), [("none", False), ("draft", True)])
def test_a_self_draft_is_written_only_for_a_job_that_loads_it(monkeypatch, method, writes):
    """The spinner once said "writing the self-draft" for speculative=none."""
    written: list[Path] = []
    said: list[JobEvent] = []
    monkeypatch.setattr(session, "ensure_packaged", lambda name: Path(name))
    monkeypatch.setattr(session, "ensure_self_draft", lambda t, n, path: written.append(path))
    job = compose_job("model=gemma3-270m", f"speculative={method}")
    with contextlib.suppress(ConfigError):  # the model's files need not be on this machine
        session.check_prerequisites(job, job.planned_launch(), Emitter([Heard(said)]))
    assert bool(written) == writes
    assert any(isinstance(e, Preparing) and "self-draft" in e.what for e in said) == writes


class Heard:
    def __init__(self, events: list[JobEvent]):
        self.events = events

    def notify(self, event: JobEvent) -> None:
        self.events.append(event)


def test_a_fixed_port_in_use_is_refused_before_anything_is_tracked(monkeypatch):
    """A port in use was once found after the job's MLflow run was created."""
    monkeypatch.setattr(session, "ensure_pair", lambda *a: pytest.fail("checked too late"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        job = compose_job("model=tiny-pair-small", f"engine.port={port}")
        with pytest.raises(ConfigError, match=f"engine.port={port} on 127.0.0.1 is already in use"):
            session.check_prerequisites(job, job.planned_launch(), Emitter())
