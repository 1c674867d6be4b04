"""docs/runbook.md: every specexp command in it runs as a dry run, every report command
parses, and every `mlflow server` flag exists in the installed MLflow. The dry runs go
through specexp's API in this process (the command line's own dry runs are
tests/process/test_dry_run.py's), MLflow's help through its click command."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from specexp import api
from specexp.compare_command import build_parser
from tests.conftest import REPO, running_in, server_pids

RUNBOOK = REPO / "docs" / "runbook.md"


def runbook_commands() -> list[list[str]]:
    """Each command line of the runbook's bash blocks, split like a shell would, comments and
    a trailing `&` dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", RUNBOOK.read_text(), re.S)
    commands = []
    for line in "\n".join(blocks).replace("\\\n", " ").splitlines():
        line = line.split("  #")[0].strip()
        if line and not line.startswith("#"):
            argv = shlex.split(line)
            commands.append(argv[:-1] if argv[-1] == "&" else argv)
    return commands


def specexp_overrides(argv: list[str]) -> list[str] | None:
    """The Hydra arguments of `python -m specexp[.doctor] ...`; None for other commands."""
    if argv[:3] in (["python", "-m", "specexp"], ["python", "-m", "specexp.doctor"]):
        return argv[3:]
    return None


COMMANDS = runbook_commands()
SPECEXP = [c for c in COMMANDS if specexp_overrides(c) is not None]


def test_the_runbook_has_the_commands_this_test_checks():
    kinds = {" ".join(c[:3]) for c in COMMANDS}
    assert (
        len(SPECEXP) >= 8
        and {"python -m specexp", "python -m specexp.doctor", "python -m specexp.compare"} <= kinds
    )
    assert any("hydra/launcher=submitit_slurm" in c for c in SPECEXP)
    assert sum(c[:2] == ["mlflow", "server"] for c in COMMANDS) == 2


@pytest.mark.parametrize("argv", SPECEXP, ids=[" ".join(c[2:])[:90] for c in SPECEXP])
def test_runbook_specexp_command_as_a_dry_run(argv, tmp_path, capsys):
    # The doctor's overrides compose the same run; its checks need the GPU node itself.
    overrides = [o for o in specexp_overrides(argv) if o != "dry_run=true"] + ["dry_run=true"]
    before = server_pids()
    # As `python -m specexp` prints it, Hydra's logging left alone (this is pytest's process).
    quiet_logs = ["hydra/job_logging=none", "hydra/hydra_logging=none"]
    capsys.readouterr()
    with running_in(tmp_path, None):
        if "-m" in overrides:
            swept = api.run_sweep([o for o in overrides if o != "-m"] + quiet_logs)
            assert swept.exit_status == 0 and not swept.failed
        else:
            api.run_job(overrides + quiet_logs)
    stdout = capsys.readouterr().out
    commands = [
        line
        for line in stdout.splitlines()
        if "sglang.launch_server" in line and not line.startswith("#")
    ]
    jobs = 5 if "+sweep=cuda13_upgrade" in overrides else 1
    assert len(commands) == jobs
    assert all("--tp-size 8" in c for c in commands)
    if "hydra/launcher=submitit_slurm" in overrides:
        for directive in (
            "--exclusive",
            "--gpus-per-node=8",
            "--ntasks-per-node=1",
            "--nodes=1",
            "--partition=gpu",
            "--array=0-4%5",
            "--time=",
        ):
            assert f"#SBATCH {directive}" in stdout
    assert server_pids() - before == set()
    assert not (tmp_path / "mlruns").exists()


def test_runbook_report_commands_parse():
    reports = [c for c in COMMANDS if c[:3] == ["python", "-m", "specexp.compare"]]
    assert reports
    for argv in reports:
        args = build_parser().parse_args(argv[3:])
        assert args.reference == "cuda13_story" and args.experiment == "cuda13-story"
    assert (REPO / "conf" / "reference" / "cuda13_story.yaml").is_file()


def test_runbook_mlflow_server_flags_exist():
    # `mlflow server --help`, as click writes it for the installed MLflow's own command.
    # Imported here: seconds of imports, otherwise in every worker that collects this file.
    from mlflow.cli import cli as mlflow_cli  # noqa: PLC0415

    server = mlflow_cli.commands["server"]
    help_text = server.get_help(click.Context(server, info_name="server"))
    for argv in (c for c in COMMANDS if c[:2] == ["mlflow", "server"]):
        flags = [a for a in argv if a.startswith("--")]
        assert flags
        for flag in flags:
            assert re.search(rf"\s{re.escape(flag)}\b", help_text), f"mlflow server has no {flag}"


def test_runbook_names_existing_stacks_and_cases():
    text = RUNBOOK.read_text()
    for name in re.findall(r"\+case=([\w-]+)", text):
        assert (REPO / "conf" / "case" / f"{name}.yaml").is_file(), name
    for stack in ("cu128", "cu130"):
        python = f"/opt/specexp/{stack}/bin/python"
        assert (
            python in (REPO / "conf" / "stack" / f"{stack}.yaml").read_text()
            and f"/opt/specexp/{stack}" in text
        )
