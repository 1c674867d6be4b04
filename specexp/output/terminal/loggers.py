"""Other libraries' log lines: Hydra's job lines without the overrides a sweep adds, and
third-party INFO lines only when asked for (``specexp -v``)."""

from __future__ import annotations

import logging
import os
import re

# What a sweep tells its jobs besides their own overrides (their parent run, label, part,
# the store): Hydra's launchers print each job's overrides, these among them.
_INTERNAL_OVERRIDE = re.compile(
    r"\s*\b(?:multirun\.\w+|tracking\.uri)=(?:'(?:[^'\\]|\\.)*'|\[[^\]]*\]|\S+)"
)
HYDRA_LAUNCHER_LOGGERS = (
    "hydra._internal.core_plugins.basic_launcher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher",
)


class _HideInternalOverrides(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not record.args:
            record.msg = _INTERNAL_OVERRIDE.sub("", record.msg)
        return True


def hide_internal_overrides() -> None:
    """Hydra's job lines (``#0 : speculative=draft``) show the job's own overrides only."""
    for name in HYDRA_LAUNCHER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideInternalOverrides) for f in logger.filters):
            logger.addFilter(_HideInternalOverrides())


# Libraries whose INFO lines are theirs, not the run's: shown with -v (SPECEXP_VERBOSE=1).
THIRD_PARTY = ("mlflow", "alembic", "huey", "sqlalchemy", "urllib3", "matplotlib", "httpx")
VERBOSE = "SPECEXP_VERBOSE"


def quiet_libraries() -> None:
    """Third-party loggers at WARNING unless $SPECEXP_VERBOSE is set (``specexp -v``), and
    log files that fail silent; jobs in other processes inherit the choice through the
    environment."""
    verbose = bool(os.environ.get(VERBOSE))
    if not verbose:
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
        # MLflow's tqdm bar ("Downloading artifacts") as a sweep reads its jobs' prompts back.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    # A store's database error, logged with its traceback as it is raised: specexp says
    # it in one line (the journal takes the run), the traceback goes to the log file.
    logging.getLogger("mlflow.store.db.utils").setLevel(
        logging.INFO if verbose else logging.CRITICAL
    )
    # A log file the disk no longer takes is skipped, not reported with a traceback each line.
    logging.raiseExceptions = False
