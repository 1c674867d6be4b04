"""Every case of every shipped sweep (conf/sweep/), CPU and GPU, composed as the sweeper
composes it, without launching: each job gets the stack, environment and settings its cases
name, and no two cases compose to the same configuration. At 2d2eba0 reference_gpu's sweep
chose its stack after its cases did (Hydra lets the config added last win), so its CUDA
graphs-off cases ran the baseline's stack - measured, and compared, as the older stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from specexp import hydra_app
from specexp.core.schemas.checks import ConfigError
from specexp.sweep.plan import SET_BY_THE_SWEEP, Plan, compose_jobs, factor_overrides
from tests.conftest import REPO, compose_run

SWEEPS = sorted(path.stem for path in (REPO / "conf" / "sweep").glob("*.yaml"))
# What a sweep needs from its command line (its file says so).
REQUIRED = {"vllm_cpu_switch_off": ["multirun.switch_off_at=8"]}


def planned_sweep(name: str, *command_line: str) -> Plan:
    compose_run()  # Hydra initialised on the project's configs, once per session
    loader = GlobalHydra.instance().config_loader()
    overrides = [f"+sweep={name}", *command_line]
    master = loader.load_configuration("config", overrides, RunMode.MULTIRUN)
    params = [f"{k}={v}" for k, v in (master.hydra.sweeper.params or {}).items()]
    jobs = hydra_app.sweep_jobs(loader, overrides, params, list(master.concurrency.levels))
    return compose_jobs(hydra_app.sweep_composer(loader, master), jobs)


def case_values(group: str, option: str) -> dict:
    """What a case file of the global package sets itself (its defaults list aside)."""
    path = REPO / "conf" / group / f"{option}.yaml"
    if "# @package _global_" not in path.read_text():
        return {}
    values = OmegaConf.to_container(OmegaConf.load(path))
    values.pop("defaults", None)
    return values


def contains(composed: dict, named: dict) -> bool:
    return all(
        contains(composed.get(k) or {}, v) if isinstance(v, dict) else composed.get(k) == v
        for k, v in named.items()
    )


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_case_of_a_shipped_sweep_composes_as_it_says(sweep: str):
    # One concurrency level: the levels share each case's server, and compose alike.
    plan = planned_sweep(sweep, "concurrency.streams=1", *REQUIRED.get(sweep, []))
    assert not plan.errors and plan.jobs
    for planned in plan.jobs:
        job = planned.job
        launch = job.command.at(8000)
        # The stack's environment reaches the server's.
        assert job.config.stack.env.items() <= launch.env.items(), planned.label
        composed = OmegaConf.to_container(OmegaConf.structured(job.config))
        for factor, option in job.factors().items():
            if (REPO / "conf" / factor / f"{option}.yaml").is_file():
                assert contains(composed, case_values(factor, option)), (planned.label, factor)


def test_reference_gpus_older_stack_cases_run_the_stack_they_name():
    jobs = {j.label: j.job for j in planned_sweep("reference_gpu").jobs}
    for case in ("cuda-graphs-off", "cuda-graphs-off-draft-costs"):
        job = jobs[f"cpu_case={case}"]
        assert job.config.stack.name == "llamacpp-cuda-nographs"
        assert job.command.at(8000).env["GGML_CUDA_DISABLE_GRAPHS"] == "1"
    assert "GGML_CUDA_DISABLE_GRAPHS" not in jobs["cpu_case=baseline"].command.at(8000).env


def test_a_case_whose_stack_lost_to_the_sweeps_is_refused():
    """2d2eba0's order (the sweep's params before the command line's +sweep): the sweep's
    own stack won over the case's, and the composition check says so."""
    compose_run()
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("config", ["+sweep=reference_gpu"], RunMode.MULTIRUN)
    compose = hydra_app.sweep_composer(loader, master)
    case = "cpu_case=cuda-graphs-off"
    with pytest.raises(ConfigError, match="names stack=llamacpp-cuda-nographs, but its job was"):
        compose([f"+{case}", "+sweep=reference_gpu", factor_overrides([case])])


def test_two_cases_that_compose_to_one_configuration_are_refused():
    plan = planned_sweep("reference_cpu", "stack=local")
    assert any(
        "cases cpu_case=baseline and cpu_case=graph-reuse-off are the same configuration" in e
        for e in plan.errors
    ), plan.errors


def test_the_command_line_still_wins_over_a_sweeps_params():
    plan = planned_sweep("capacity_gpu", "speculative=draft")
    assert [str(j.job.config.speculative.method) for j in plan.jobs] == ["draft"]


def test_every_shipped_sweep_is_checked():
    assert len(SWEEPS) == len(list(Path(REPO / "conf" / "sweep").glob("*.yaml"))) >= 14


@pytest.mark.parametrize(
    "own",
    [
        ["+sweep=cpu_crossover", "speculative=ngram", "concurrency.streams=4"],
        # A job's own launch budget: set again by the sweep, the last one wins as in Hydra.
        ["speculative=draft", "stats.launches=3", "workload.prompt='a, b = c'"],
    ],
)
def test_a_launch_composed_once_is_the_launch_hydra_composes(own: list[str]):
    """What the sweep adds to a job's overrides for a launch, set on a copy of the job's
    composition (hydra_app.ComposedOnce), gives the config Hydra composes from all of them -
    its own node too (overrides, choices, override_dirname) - and the job is composed once."""
    compose_run()
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("config", ["hydra.mode=MULTIRUN"], RunMode.MULTIRUN)
    counting = CountingLoader(loader)
    once = hydra_app.ComposedOnce(counting, SET_BY_THE_SWEEP)
    for part in (0, 1):
        launch = [
            *own,
            "multirun.server_launch=1",
            "multirun.job_label='speculative=draft, 4 streams'",
            factor_overrides(["speculative=draft", "it's"]),
            "multirun.parent_run_id=0123abcd",
            f"multirun.part={part}",
            "multirun.part_runs=2",
            "stats.launches=6",
        ]
        expected = loader.load_sweep_config(master, launch)
        got = once.load_sweep_config(master, launch)
        assert OmegaConf.to_container(got) == OmegaConf.to_container(expected)
        assert got.multirun.part == part and got.stats.launches == 6
    assert counting.compositions == 1


class CountingLoader:
    def __init__(self, loader):
        self.loader, self.compositions = loader, 0

    def load_sweep_config(self, master, overrides):
        self.compositions += 1
        return self.loader.load_sweep_config(master, overrides)
