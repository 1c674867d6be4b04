"""Measuring a server specexp did not start (engine.url): a llama.cpp server started here
behind an API key, measured with the same statistics and tracking, and left running."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from specexp import api
from specexp.analysis.results import RunStatus
from specexp.serving.server import ExternalServer, die_with_parent
from tests.conftest import (
    TINY,
    compose_job,
    llamacpp_launch,
    running_in,
    runs_in,
    specexp_in_process,
)

KEY = "sk-specexp-test-4f7c2a"  # a made-up key: it must appear nowhere specexp writes


@pytest.fixture(scope="module")
def keyed_server():
    """One server behind the key for the module's tests: none of them stops or changes it."""
    launch, port = llamacpp_launch("concurrency.streams=2")
    process = subprocess.Popen(
        [*launch.argv, "--api-key", KEY],
        env={**os.environ, **launch.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent,  # gone with the test session, however it ends
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            time.sleep(0.2)
    try:
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_running_server_is_measured_and_left_running(keyed_server, tmp_path, tracking_env):
    url, process = keyed_server
    overrides = (*TINY, f"engine.url={url}", "engine.api_key_env=SPECEXP_TEST_KEY")
    result = specexp_in_process(
        *overrides, cwd=tmp_path, env={**tracking_env, "SPECEXP_TEST_KEY": KEY}
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert process.poll() is None  # not specexp's to stop
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    tags, metrics = run.data.tags, run.data.metrics
    assert run.info.status == "FINISHED" and metrics["tok_per_s_mean"] > 0
    assert tags["stack.external_server"] == url and tags["server_url"] == url
    # What a server it did not start cannot show is unknown, not guessed.
    assert tags["engaged.attention_backend"] == "unknown"
    written = "".join(
        p.read_text(errors="replace") for p in Path(tmp_path).rglob("*") if p.is_file()
    )
    assert KEY not in written + result.stdout + result.stderr
    assert KEY not in json.dumps([run.data.params, tags])
    records = next(Path(tmp_path).glob("outputs/*/*/requests.jsonl")).read_text().splitlines()
    assert all(json.loads(line)["ok"] for line in records)


def test_a_missing_or_wrong_key_is_said(keyed_server, tmp_path, tracking_env, monkeypatch):
    """By the API in this process: what the command line prints of a config error and of a
    failed job, and its exit statuses, are tests/process/test_cli.py's."""
    url, _ = keyed_server
    overrides = [*TINY, f"engine.url={url}", "engine.api_key_env=SPECEXP_TEST_KEY"]
    monkeypatch.delenv("SPECEXP_TEST_KEY", raising=False)
    with running_in(tmp_path, tracking_env), pytest.raises(api.NotRun) as missing:
        api.run_job(overrides, quiet=True)
    assert missing.value.exit_status == 2 and "$SPECEXP_TEST_KEY is not set" in missing.value.why
    with running_in(tmp_path, {**tracking_env, "SPECEXP_TEST_KEY": "nope"}):
        wrong = api.run_job(overrides, quiet=True)
    assert wrong.status == RunStatus.failed and "HTTP 401" in str(wrong.error), wrong.error


def test_a_server_on_this_host_is_found_by_its_port_for_telemetry(keyed_server, tmp_path):
    """Its CPU is counted as the server's, not as other load on the machine."""
    url, process = keyed_server
    external = ExternalServer(url, "/health", tmp_path / "server.log", {})
    assert external.server_pid() == process.pid
    elsewhere = ExternalServer("http://192.0.2.1:8000", "/health", tmp_path / "x.log", {})
    assert elsewhere.server_pid() is None  # not this host's: nothing to look up


@pytest.mark.no_engine_server
def test_a_server_elsewhere_needs_no_gpu_of_this_host():
    """The example of docs/guides/external-server.md: vLLM's protocol against a remote endpoint, on a machine
    without GPUs, takes no GPU lease (it was refused: "a server needs 1 GPU(s)")."""
    job = compose_job("engine=vllm", "engine.url=http://10.0.0.5:8000", "model=tiny-pair-small")
    assert job.config.engine.gpus == 0
    explicit = compose_job(
        "engine=vllm", "engine.url=http://10.0.0.5:8000", "model=tiny-pair-small", "engine.gpus=0"
    )
    assert explicit.config.engine.gpus == 0
