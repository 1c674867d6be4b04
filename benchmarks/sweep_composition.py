"""What composing a sweep's launches costs: each launch composed by Hydra, against each job
composed once and its launches set on copies (specexp.hydra_app.ComposedOnce).

    python benchmarks/sweep_composition.py [--jobs 2] [--launches 8] [--repeat 3]

A sequential comparison's arms as the sweep launches them (plan.overrides_for, each launch's
part and runs), on the project's configs: CPU seconds per launch each way, best of
``--repeat``, and that the two give the same configs.
"""

from __future__ import annotations

import argparse
import time

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from specexp import hydra_app
from specexp.sweep.plan import SET_BY_THE_SWEEP, factor_overrides

JOB = ["model=tiny-pair-small", "workload=short", "speculative=draft"]


def launches(jobs: int, per_job: int) -> list[list[str]]:
    return [
        [
            *JOB,
            f"replicate={job}",
            "multirun.server_launch=1",
            f"multirun.job_label='replicate={job}'",
            factor_overrides([f"replicate={job}"]),
            "multirun.parent_run_id=0123abcd",
            f"multirun.part={part}",
            "multirun.part_runs=2",
            f"stats.launches={per_job}",
        ]
        for job in range(jobs)
        for part in range(per_job)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--launches", type=int, default=8, help="per job")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    hydra_app.register()
    with initialize_config_dir(config_dir=hydra_app.CONFIG_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["hydra.mode=MULTIRUN"], RunMode.MULTIRUN)
        each = launches(args.jobs, args.launches)
        composers = {
            "Hydra, each launch": lambda: loader,
            "each job once": lambda: hydra_app.ComposedOnce(loader, SET_BY_THE_SWEEP),
        }
        timed = {}
        for name, composer in composers.items():
            best = float("inf")
            for _ in range(args.repeat):
                composing = composer()  # a new one each time: nothing composed yet
                started = time.process_time()
                configs = [composing.load_sweep_config(master, o) for o in each]
                best = min(best, time.process_time() - started)
            timed[name] = (best, [OmegaConf.to_container(c) for c in configs])
    print(f"{args.jobs} jobs x {args.launches} launches, best of {args.repeat} (CPU seconds)")
    for name, (seconds, _) in timed.items():
        print(f"  {name:<20} {seconds:7.3f} s  {1000 * seconds / len(each):7.1f} ms a launch")
    same = timed["Hydra, each launch"][1] == timed["each job once"][1]
    print(f"  the same configs: {same}")


if __name__ == "__main__":
    main()
