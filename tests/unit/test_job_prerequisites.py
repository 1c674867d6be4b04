"""What a job prepares before it starts: only what its server will load."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from specexp.core.schemas.checks import ConfigError
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
        session.check_prerequisites(job, Emitter([Heard(said)]))
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
            session.check_prerequisites(job, Emitter())


@pytest.mark.parametrize("model", ["tiny-pair-small", "gemma3-270m"])
def test_the_draft_alone_serves_the_draft_model_without_speculation(model):
    """speculative=draft_alone: the arm whose speed gives a draft's cost c against the bound
    (the report finds it by its model path, the draft arm's draft model)."""
    draft = compose_job(f"model={model}", "speculative=draft").config
    alone = compose_job(f"model={model}", "speculative=draft_alone").config
    assert alone.speculative.method == "none"
    assert alone.model.path == draft.speculative.draft_model == draft.model.draft_path
    assert alone.model.path != draft.model.path


def test_serving_the_draft_of_a_model_without_one_is_refused():
    with pytest.raises(ConfigError, match="model.serve_draft: model=smollm2-135m has no draft"):
        compose_job("model=smollm2-135m", "model.self_draft_layers=null", "speculative=draft_alone")


def test_the_self_draft_served_alone_is_written_from_the_packaged_target(monkeypatch):
    """With model.serve_draft the served path is the self-draft's own: its target is the
    packaged file, not model.path."""
    written: list[tuple[Path, Path]] = []
    monkeypatch.setattr(session, "ensure_packaged", lambda name: Path("/packaged") / name)
    monkeypatch.setattr(session, "ensure_self_draft", lambda t, n, p: written.append((t, p)))
    job = compose_job("model=gemma3-270m", "speculative=draft_alone")
    with contextlib.suppress(ConfigError):  # the model's files need not be on this machine
        session.check_prerequisites(job, Emitter())
    assert written == [(Path("/packaged/gemma3-270m"), Path(job.config.model.path))]
