"""``python -m specexp [overrides]`` runs one job; ``-m`` sweeps over overrides (Hydra multirun)."""

from __future__ import annotations

import signal

import hydra

from specexp import hydra_app


def _interrupt_on_sigterm(signum, frame):
    # Python's default SIGTERM ends the process without unwinding, which would orphan the
    # server; as KeyboardInterrupt it runs every cleanup handler on the way out.
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    hydra_app.register()
    hydra.main(version_base="1.3", config_path=hydra_app.CONFIG_DIR, config_name="config")(
        hydra_app.run_one
    )()
