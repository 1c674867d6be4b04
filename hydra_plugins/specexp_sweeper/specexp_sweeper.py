"""Hydra sweeper plugin: expands the sweep, then hands it to specexp's planning (specexp.sweep).

Hydra only instantiates sweepers that live in the ``hydra_plugins`` package (and loads this
module outside sys.modules, so no ``from __future__ import annotations`` here). It is built
on Hydra's public ``Sweeper`` interface; the logic is in :mod:`specexp.sweep`.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from specexp.core.durable import write_atomic
from specexp.core.redaction import redact_tree


@dataclass
class SpecexpSweeperConf:
    _target_: str = "hydra_plugins.specexp_sweeper.specexp_sweeper.SpecexpSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="specexp", node=SpecexpSweeperConf, provider="specexp"
)


class SpecexpSweeper(Sweeper):
    def __init__(
        self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None
    ):
        self.max_batch_size = max_batch_size
        self.params = params or {}

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> Any:
        # Imported here: Hydra imports every plugin module whenever it starts, and the sweep
        # brings MLflow (about a second) that a single run does not need this early.
        from specexp import hydra_app  # noqa: PLC0415
        from specexp.sweep.launch import run_sweep  # noqa: PLC0415

        assert self.hydra_context is not None and self.config is not None, (
            "Hydra calls setup() first"
        )
        config = self.config
        loader = hydra_app.compose_launches_once(self.launcher, self.hydra_context)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        # The sweep's config as Hydra composed it, its overrides among them (a tracking URI
        # with a password), credentials redacted.
        composed = OmegaConf.to_container(self.config, resolve=False)
        write_atomic(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(redact_tree(composed)))
        return run_sweep(
            hydra_app.sweep_composer(loader, config),
            sweep_dir,
            hydra_app.sweep_jobs(
                loader,
                list(arguments),
                [f"{key}={value}" for key, value in self.params.items()],
                list(self.config.concurrency.levels),
            ),
            self.launcher,
            self.max_batch_size,
        )
