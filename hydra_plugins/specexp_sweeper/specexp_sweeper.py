"""Hydra sweeper plugin: the basic sweeper's expansion, then specexp's planning (sweep.py).

Hydra only instantiates sweepers that live in the ``hydra_plugins`` package (and loads this
module outside sys.modules, so no ``from __future__ import annotations`` here); the logic is
in :mod:`specexp.sweep`, this class only connects it to Hydra.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf


@dataclass
class SpecexpSweeperConf:
    _target_: str = "hydra_plugins.specexp_sweeper.specexp_sweeper.SpecexpSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="specexp", node=SpecexpSweeperConf, provider="specexp")


class SpecexpSweeper(BasicSweeper):
    def sweep(self, arguments: List[str]) -> Any:
        from specexp.sweep import run_sweep

        params = self._parse_config()
        params.extend(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        batches = self.split_arguments(parser.parse_overrides(params), None)
        jobs = [list(job) for batch in batches for job in batch]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        return run_sweep(self.hydra_context.config_loader, self.config, jobs, self.launcher, self.max_batch_size)
