"""The offline journal: a run's calls written beside its measurements when the store cannot
take them (from the start, or from a failure mid-run), and replayed into a store by
``python -m specexp.upload``."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from specexp.analysis.results import Artifact, RunStatus, Tag
from specexp.core.durable import write_atomic
from specexp.core.redaction import redact_text
from specexp.host import interrupt
from specexp.tracking.store import RunLog, TrackingStore, now_ms, stored_values


def uploaded(journal: Path) -> Path:
    """Where a journal goes once uploaded, so that it is not uploaded twice."""
    return journal.with_name(journal.name.replace(".json", ".uploaded.json"))


def journals_under(directories: Sequence[Path]) -> dict[Artifact, list[Path]]:
    """The journals under ``directories`` not uploaded yet, by kind: jobs' runs first (a
    sweep's report is read back from its jobs' runs), then sweeps' reports."""
    return {
        name: [j for d in directories for j in sorted(d.rglob(str(name)))]
        for name in (Artifact.offline_journal, Artifact.report_journal)
    }


class OfflineRun:
    """Stands in for :class:`RunLog` when the store cannot be reached: the run's start and
    every call are written to a journal beside the measurements, and
    ``python -m specexp.upload DIR`` replays it."""

    run_id = "offline"

    def __init__(
        self,
        journal: Path,
        uri: str,
        experiment: str,
        reason: str,
        run_name: str = "",
        tags: Optional[dict[str, str]] = None,
        parent_run_id: Optional[str] = None,
        continues: Optional[str] = None,
    ):
        """A new run (``run_name``, ``tags``, ``parent_run_id``), its journal written now, or
        the rest of the run ``continues`` that the store stopped taking mid-run, written with
        its first call (so that a full disk at that write leaves it taking the calls after)."""
        self.path, self.uri = journal, uri
        self.journal: dict[str, Any] = {
            "tracking_uri": uri,
            "experiment": experiment,
            "reason": reason,
            "id": uuid.uuid4().hex,  # the run an upload makes of it is tagged with it
            **(
                {"continues": continues}
                if continues
                else {"start": [run_name, stored_values(tags or {}), parent_run_id]}
            ),
            "calls": [],
        }
        if continues:
            self.run_id = continues
        else:
            self._write()

    def _write(self) -> None:
        write_atomic(self.path, json.dumps(self.journal, indent=1, default=str))

    def _record(self, name: str, *args: Any) -> None:
        self.journal["calls"].append([name, list(args)])
        self._write()

    def log_params(self, params: dict[str, Any]) -> None:
        self._record("log_params", stored_values(params))

    def log_metrics(
        self, metrics: dict[str, float], step: int = 0, timestamp_ms: Optional[int] = None
    ) -> None:
        self._record("log_metrics", metrics, step, timestamp_ms or now_ms())

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._record("set_tags", stored_values(tags))

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        self._record("log_artifacts", [str(p) for p in paths], artifact_path)

    def end(self, status: str = RunStatus.finished) -> None:
        self._record("end", status)


class FailoverRun:
    """A run's log that outlives its store: the first call the store fails (a tracking server
    killed mid-run) and every call after it go to a journal beside the measurements that
    continues the run, and ``python -m specexp.upload DIR`` completes it. ``on_failover`` is
    told why, once, when the journal holds a call (a full disk may refuse the first one)."""

    def __init__(self, run: RunLog, journal: Path, on_failover: Callable[[str], None]):
        self.run, self.journal, self.on_failover = run, journal, on_failover
        self.run_id, self.uri = run.run_id, run.uri
        self.offline: Optional[OfflineRun] = None
        self._untold: Optional[str] = None  # why it failed over, until it is said

    def _call(self, name: str, *args: Any) -> None:
        if self.offline is None:
            try:
                with interrupt.deferred():
                    getattr(self.run, name)(*args)
                return
            except Exception as exc:  # whatever the store's failure, the run goes on
                self._untold = (
                    redact_text(str(exc).splitlines()[0][:500]) if str(exc) else repr(exc)
                )
                self.offline = OfflineRun(
                    self.journal,
                    redact_text(self.uri),
                    self.run.store.experiment_name,
                    self._untold,
                    continues=self.run_id,
                )
        try:
            getattr(self.offline, name)(*args)
        finally:
            if self._untold is not None and self.journal.exists():
                reason, self._untold = self._untold, None
                self.on_failover(reason)

    def log_params(self, params: dict[str, Any]) -> None:
        self._call("log_params", params)

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        # One time for both: a batch the store took before failing, journaled too, is
        # uploaded as the same points, which MLflow keeps once.
        self._call("log_metrics", metrics, step, now_ms())

    def set_tags(self, tags: dict[str, Any]) -> None:
        self._call("set_tags", tags)

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        self._call("log_artifacts", list(paths), artifact_path)

    def end(self, status: str = RunStatus.finished) -> None:
        self._call("end", status)


@dataclass
class Replayed:
    """What an upload of a journal did: its run, the calls replayed, whether the journal
    stopped before the run ended (its process killed, its disk full), and whether an earlier
    upload had completed it (then nothing was replayed)."""

    run_id: str
    calls: int
    cut_short: bool
    already: bool = False


def replay(journal_path: Path, uri: Optional[str] = None) -> Replayed:
    """Upload an offline journal to MLflow (its own URI, or ``uri``): a new run, or the rest
    of the run it continues. A journal that stops before the run's end ends it FAILED,
    saying so; files it logged are found beside it if they were moved with it. Uploading it
    again (the first upload killed) completes the same run: the run is found by the
    journal's id, and every call logs what it logged the first time."""
    journal = json.loads(journal_path.read_text())
    store = TrackingStore(uri or journal["tracking_uri"], journal["experiment"])
    store.end_abandoned()
    done = store.uploaded_run(journal)
    if done:  # a copy of a journal uploaded before: the store has it all
        return Replayed(done, 0, False, already=True)
    journal_id = journal.get("id")
    run_id = journal.get("continues") or (journal_id and store.journaled_run(journal_id))
    if run_id:
        run = store.run(run_id)
        store.unabandon(run_id)
    else:
        name, tags, parent = journal["start"]
        run = store.start_run(
            name, {**tags, **({Tag.journal: journal_id} if journal_id else {})}, parent
        )
    calls = journal["calls"]
    for name, args in calls:
        if name == "log_artifacts":
            here = [Path(p) for p in args[0]]
            args = [[p if p.exists() else journal_path.parent / p.name for p in here], args[1]]
        getattr(run, name)(*args)
    cut_short = not calls or calls[-1][0] != "end"
    if cut_short:
        run.set_tags(
            {Tag.failure: "its journal stops before the run's end (killed, or a full disk)"}
        )
        run.end(RunStatus.failed)
    return Replayed(run.run_id, len(calls), cut_short)
