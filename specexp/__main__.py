"""``python -m specexp [overrides]`` runs one job; ``-m`` sweeps over overrides (Hydra multirun)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from specexp import hydra_app
from specexp.job import prepare
from specexp.report import console
from specexp.runner import run_job
from specexp.schemas import ConfigError


def _interrupt_on_sigterm(signum, frame):
    # Python's default SIGTERM ends the process without unwinding, which would orphan the
    # server; as KeyboardInterrupt it runs every cleanup handler on the way out.
    raise KeyboardInterrupt(f"signal {signum}")


@hydra.main(version_base="1.3", config_path=hydra_app.CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> str:
    # A launcher's job process may inherit SIGINT ignored (a sweep started with `&` from a
    # script), and an interrupted sweep stops its jobs with SIGINT: make it KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = run_job(prepare(cfg), Path(HydraConfig.get().runtime.output_dir))
    except ConfigError as exc:
        console.print(f"[red]config error:[/] {exc}")
        sys.exit(2)
    if result.status == "FAILED" and HydraConfig.get().mode.name == "RUN":
        sys.exit(1)
    return result.status


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    hydra_app.register()
    main()
