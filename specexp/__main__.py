"""``python -m specexp [overrides]`` runs one job; ``-m`` sweeps over overrides (Hydra multirun)."""

from __future__ import annotations

import signal
import sys

import hydra

from specexp import hydra_app
from specexp.output.terminal import console


def _interrupt_on_sigterm(signum, frame):
    # Python's default SIGTERM ends the process without unwinding, which would orphan the
    # server; as KeyboardInterrupt it runs every cleanup handler on the way out.
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    hydra_app.register()
    try:
        hydra.main(version_base="1.3", config_path=hydra_app.CONFIG_DIR, config_name="config")(
            hydra_app.run_one
        )()
    except KeyboardInterrupt as interrupt:
        # Every handler on the way up has cleaned up: one line, and the shell's exit status.
        signum = signal.SIGTERM if str(interrupt) == f"signal {signal.SIGTERM}" else signal.SIGINT
        console.print(
            f"[yellow]interrupted ({signal.Signals(signum).name}):[/] every server specexp "
            "started is stopped and open runs are ended as KILLED; what was measured is kept"
        )
        return 128 + signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
