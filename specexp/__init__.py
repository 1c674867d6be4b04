"""specexp: experiments on LLM-serving performance, speculative decoding first.

The package is drawn as layer bands, one subpackage each, listed here bottom to top. A
module imports from its own band or those below, never above (tests/unit/test_layers.py
reads this list and the tree, and checks docs/design.md's Layout table against both). The
package root holds the entry points, above every band.

The Python API (specexp.api) is exported here, loaded on first use: importing a band's
module (``specexp.core.stats.comparison``) does not import the API and all it runs on::

    import specexp
    result = specexp.run_job(["model=tiny-pair-small", "speculative=draft"], quiet=True)
"""

import importlib
from typing import Any

BANDS = ("core", "engines", "host", "serving", "analysis", "run", "output", "tracking", "sweep")

__all__ = [
    "ComparisonReport",
    "JobResult",
    "LoadedRun",
    "NotRun",
    "Observe",
    "SweepResult",
    "UsageError",
    "compare_runs",
    "load",
    "run_job",
    "run_sweep",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("specexp.api"), name)
    raise AttributeError(f"module 'specexp' has no attribute {name!r}")
