"""The error a config that cannot run raises, and the range checks the schemas share."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A composition that cannot run as asked; the message names the option and the fix."""


def at_least(owner: str, minimum: float, **values: Any) -> None:
    for name, value in values.items():
        if value < minimum:
            raise ConfigError(f"{owner}.{name} must be >= {minimum:g}, got {value}")


def fraction(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not 0 < value < 1:
            raise ConfigError(f"{owner}.{name} must be between 0 and 1, got {value}")
