"""Engine plugins. Adding an engine is one folder here (``specexp/engines/<name>/``: its
settings, its engine, its stream parsing, the programs its own interpreter runs) and one
``conf/engine/<name>.yaml``: the folders of this package are discovered on first use, not
listed anywhere. What each consumer needs of an engine is a Protocol the consumer owns
(base.py names them)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.engines import trtllm
from specexp.engines.base import Engine
from specexp.engines.records import BatchSchedule, ScheduleSetting


@cache
def engines() -> dict[str, Engine[Any]]:
    """The engine of every folder of this package, by name."""
    found: dict[str, Engine[Any]] = {}
    for folder in pkgutil.iter_modules(__path__):
        if not folder.ispkg:
            continue
        package = importlib.import_module(f"{__name__}.{folder.name}")
        classes = [
            value
            for value in vars(package).values()
            if isinstance(value, type)
            and issubclass(value, Engine)
            and f"{value.__module__}.".startswith(f"{package.__name__}.")
        ]
        if len(classes) != 1:
            raise TypeError(f"{package.__name__} must export one Engine class, found {classes}")
        (engine,) = classes
        found[engine.name] = engine()
    return dict(sorted(found.items()))


def get_engine(name: str) -> Engine[Any]:
    try:
        return engines()[name]
    except KeyError:
        raise ConfigError(
            f"engine={name} is unknown; valid choices: {', '.join(engines())}"
        ) from None


def schedule_settings(
    schedule: BatchSchedule, speculative: SpeculativeConfig
) -> dict[str, ScheduleSetting]:
    """``schedule`` for ``speculative``'s method in each engine's own terms: every engine
    plugin's, and TensorRT-LLM's (read from its source; it does not run here)."""
    return {
        **{name: engine.schedule(schedule, speculative) for name, engine in engines().items()},
        "trtllm": trtllm.draft_len_schedule(schedule, speculative.method),
    }
