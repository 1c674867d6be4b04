"""The one wiring point between Hydra and specexp's typed layers: the config directory, the
schemas in Hydra's ConfigStore (each engine's own among them), and the launcher presets'
resolvers. Called by the command-line entry points before Hydra composes anything; jobs
that Hydra launches in other processes get the same state with Hydra's singletons."""

from __future__ import annotations

from pathlib import Path

from hydra.core.config_store import ConfigStore

from specexp import launchers
from specexp.engines import engines
from specexp.schemas import GROUP_SCHEMAS, RunConfig

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")


def register() -> None:
    """Put the schemas into Hydra's ConfigStore (YAML options extend them by name) and
    register the resolvers the launcher presets use."""
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunConfig)
    for group, node in GROUP_SCHEMAS.items():
        store.store(group=group, name=f"{group}_schema", node=node)
    for engine in engines().values():
        store.store(group="engine", name=f"{engine.name}_schema", node=engine.config_class)
    launchers.register_resolvers()
    launchers.quiet_preset_validation()
