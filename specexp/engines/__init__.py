"""Engine plugins. Adding an engine is one module here (an :class:`Engine` subclass with its
:class:`EngineConfig` subclass) and one ``conf/engine/<name>.yaml``: modules of this package
are discovered on first use, not listed anywhere."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from specexp.core.schemas import ConfigError
from specexp.engines.base import Engine


@cache
def engines() -> dict[str, Engine[Any]]:
    """Every engine defined in a module of this package, by name."""
    found: dict[str, Engine[Any]] = {}
    for module_info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Engine)
                and value is not Engine
                and value.__module__ == module.__name__
            ):
                found[value.name] = value()
    return dict(sorted(found.items()))


def get_engine(name: str) -> Engine[Any]:
    try:
        return engines()[name]
    except KeyError:
        raise ConfigError(
            f"engine={name} is unknown; valid choices: {', '.join(engines())}"
        ) from None
