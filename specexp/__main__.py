"""``python -m specexp [overrides]`` runs one job; ``-m`` sweeps over overrides (Hydra multirun)."""

from __future__ import annotations

import signal
import sys

import hydra

from specexp import hydra_app
from specexp.api import check_overrides
from specexp.host import interrupt
from specexp.options import USAGE_EXIT, UsageError
from specexp.output import terminal


def main() -> int:
    interrupt.install()
    terminal.quiet_libraries()
    hydra_app.register()
    try:
        check_overrides(sys.argv[1:])
    except UsageError as exc:
        terminal.print_stopped("usage error", str(exc))
        return USAGE_EXIT
    hydra_app.on_not_run.append(lambda stopped: terminal.print_stopped(stopped.what, stopped.why))
    try:
        hydra.main(version_base="1.3", config_path=hydra_app.CONFIG_DIR, config_name="config")(
            hydra_app.run_one
        )()
    except KeyboardInterrupt:
        return terminal.interrupted(interrupt.received() or signal.SIGINT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
