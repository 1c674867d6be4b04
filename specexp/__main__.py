"""``python -m specexp [overrides]`` runs one job; ``-m`` sweeps over overrides (Hydra multirun).
The same command as ``specexp run`` and ``specexp sweep``: :func:`specexp.api.run_command`."""

from __future__ import annotations

import sys

from specexp import cli
from specexp.api import run_command


def main() -> int:
    args = sys.argv[1:]
    if "--version" in args:  # specexp's, as `specexp --version` says it (not Hydra's)
        print(cli.version())
        return 0
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
