"""From the command line, a config that cannot run fails before anything launches."""

from __future__ import annotations

from tests.conftest import SPECEXP, nothing_tracked, run_cli, server_pids


def test_cli_fails_fast_without_traceback_and_launches_nothing(tmp_path, tracking_env):
    before = server_pids()
    result = run_cli(
        "run", "allreduce_backend=nccl", cwd=tmp_path, env=tracking_env, timeout=120, module=SPECEXP
    )
    assert result.returncode == 2
    assert (
        "config error: allreduce_backend=nccl is not supported by engine=llamacpp" in result.stdout
    )
    assert "Traceback" not in result.stdout + result.stderr
    assert server_pids() - before == set()
    assert nothing_tracked(tmp_path)  # nothing was tracked either


def test_unknown_group_option_is_a_usage_error_listing_choices(tmp_path):
    result = run_cli("run", "speculative=medusa", cwd=tmp_path, timeout=120, module=SPECEXP)
    assert result.returncode == 2  # a usage error, caught before Hydra composes
    assert "unknown speculative option 'medusa'" in result.stdout
    assert "eagle3" in result.stdout and "ngram" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
