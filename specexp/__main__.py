"""``python -m specexp [overrides]`` runs one job; ``-m`` sweeps over overrides (Hydra multirun).
The same command as ``specexp run`` and ``specexp sweep``: :func:`specexp.api.run_command`."""

from __future__ import annotations

import sys

from specexp.api import run_command


def main() -> int:
    return run_command(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
