"""Where a tracking store is: the URI in force, checked for typos, a SQLite store's artifacts
beside its database, and the lock held while a store is created.

The default store is SQLite under ``./mlruns`` with artifacts beside it - MLflow's supported
local backend (its plain file store is deprecated in 3.x). ``MLFLOW_TRACKING_URI`` overrides
it, as everywhere in MLflow.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlparse

from specexp.core.redaction import redact_text


def default_store(root: Optional[Path] = None) -> tuple[str, str]:
    """(tracking URI, artifact root) of the local store under ``root``/mlruns."""
    base = (root or Path.cwd()) / "mlruns"
    uri = f"sqlite:///{base / 'mlflow.db'}"
    return uri, artifacts_beside(uri) or ""


def artifacts_beside(uri: str) -> Optional[str]:
    """A SQLite store's artifact root: ``artifacts/`` beside its database, wherever the URI
    puts it (else MLflow would put a new experiment's artifacts under ./mlruns, away from
    its runs). None for other stores, which say where their artifacts go themselves."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri.removeprefix("sqlite:///")).absolute()
    return (database.parent / "artifacts").as_uri()


def uri_in_force(configured: Optional[str]) -> tuple[str, Optional[str]]:
    """The URI in force (tracking.uri, else $MLFLOW_TRACKING_URI, else the local store) and,
    for a SQLite store, its artifact root beside the database."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or default_store()[0]
    return uri, artifacts_beside(uri)


# Schemes of the stores MLflow's tracking client takes (a database's with its driver, as
# in postgresql+psycopg2); a plain path is a file store.
_NETWORK_SCHEMES = ("http", "https", "postgresql", "mysql", "mssql")
_SCHEMES = (*_NETWORK_SCHEMES, "sqlite", "file", "", "databricks", "databricks-uc")
# A scheme with its colon or slashes lost, which would otherwise be taken for a path.
_SCHEME_TYPO = re.compile(r"(https?|sqlite|file|postgresql|mysql|mssql)(/|:[^/])")


def uri_problem(uri: str) -> Optional[str]:
    """Why ``uri`` cannot be a tracking store's address (a typo), or None: refused before
    anything runs rather than taken for a store that is down."""
    try:
        parsed = urlparse(uri)
        parsed.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        return f"tracking URI {redact_text(uri)!r} is malformed ({exc})"
    scheme = parsed.scheme.split("+")[0]
    if scheme not in _SCHEMES or _SCHEME_TYPO.match(uri):
        return (
            f"tracking URI {redact_text(uri)!r}: no MLflow store has the scheme "
            f"{parsed.scheme!r} (http://HOST:PORT, sqlite:///PATH, or a database URL)"
        )
    if scheme in _NETWORK_SCHEMES and not parsed.hostname:
        return f"tracking URI {redact_text(uri)!r} names no host ({scheme}://HOST:PORT)"
    if scheme == "sqlite" and not parsed.path.strip("/"):
        return f"tracking URI {redact_text(uri)!r} names no database file (sqlite:///PATH)"
    return None


@contextlib.contextmanager
def creating(uri: str) -> Iterator[None]:
    """Held while a store is opened and its experiment found or made: one process at a time
    per SQLite file, so that two starting on a new store do not both run MLflow's schema
    migration (the loser's half-done migration breaks the store for good). SQLite takes one
    writer at a time after that too; a write that finds it busy past SQLite's wait fails
    over to the run's journal (:class:`FailoverRun`), and jobs that run side by side must
    log to a tracking server (specexp.run.launchers.check)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def tracking_uri(configured: Optional[str]) -> tuple[str, Optional[str]]:
    """:func:`uri_in_force`, with a SQLite store's directory created."""
    uri, artifacts = uri_in_force(configured)
    if artifacts is not None:
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return uri, artifacts
