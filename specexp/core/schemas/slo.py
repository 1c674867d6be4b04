"""The slo config group: the service levels a request must meet to count as good."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from specexp.core.schemas.checks import ConfigError, fraction


@dataclass
class SloConfig:
    """Service levels a request must meet, every one that is set, to count as good: its
    time to first token, its inter-token latency (its mean, or a percentile of its own gaps),
    its end-to-end latency. Goodput is the requests (and their tokens) per second that met
    them; attainment, the share that did. ``target``: the attainment capacity is read at."""

    name: str = MISSING
    ttft_s: Optional[float] = None
    itl_s: Optional[float] = None
    # Null: the request's mean inter-token latency; else this percentile (0-100) of its gaps.
    itl_percentile: Optional[float] = None
    e2e_s: Optional[float] = None
    target: float = 0.9

    @property
    def defined(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.itl_s, self.e2e_s))

    def __post_init__(self) -> None:
        for key in ("ttft_s", "itl_s", "e2e_s"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"slo.{key} must be > 0 seconds (or null), got {value}")
        if self.itl_percentile is not None and not 0 < self.itl_percentile <= 100:
            raise ConfigError(f"slo.itl_percentile must be in (0, 100], got {self.itl_percentile}")
        fraction("slo", target=self.target)
