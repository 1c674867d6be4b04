"""The one record format: every record type's history, records written by earlier releases
opened by today's readers, and records that are not one refused with where and why."""

from __future__ import annotations

import copy
import dataclasses
import json
import pkgutil
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

import specexp
from specexp.analysis.crossover import Crossover
from specexp.analysis.report import SweepReport
from specexp.core.records import Record, RecordError
from specexp.core.stats.verdicts import Verdict
from specexp.output.markdown import sweep_description
from specexp.tracking.store import MAX_TAG
from tests.conftest import REPO

WRITTEN = Path(__file__).parent / "records"


def written(name: str) -> dict[str, Any]:
    return json.loads((WRITTEN / name).read_text())


def record_types() -> list[type[Record]]:
    for module in pkgutil.walk_packages(specexp.__path__, "specexp."):
        import_module(module.name)
    found, stack = [], list(Record.__subclasses__())
    while stack:
        kind = stack.pop()
        found.append(kind)
        stack.extend(kind.__subclasses__())
    return found


def test_every_record_type_names_its_versions_and_what_each_added_has_a_default():
    kinds = record_types()
    assert {k.HISTORY.record for k in kinds} >= {"sweep report", "comparison", "request"}
    for kind in kinds:
        assert dataclasses.is_dataclass(kind), kind
        fields = {f.name: f for f in dataclasses.fields(kind)}
        for version in kind.HISTORY.versions:
            assert version.added, (kind, version.number)
            for name in version.fields:
                default = fields[name].default, fields[name].default_factory
                assert default != (dataclasses.MISSING, dataclasses.MISSING), (kind, name)


def unversioned(value: Any) -> Any:
    """A JSON value without the format versions in it."""
    if isinstance(value, dict):
        return {k: unversioned(v) for k, v in value.items() if k != "format_version"}
    if isinstance(value, list):
        return [unversioned(v) for v in value]
    return value


def as_format_2(advice: dict[str, Any]) -> dict[str, Any]:
    """A crossover's recommendation as format 2 wrote it: each engine's setting beside the
    threshold, and only the words it had."""
    said = {k: v for k, v in advice.items() if k in ("note", "basis") and v}
    settings = {
        engine: {k: v for k, v in {**switch, **switch["files"]}.items() if v and k != "files"}
        for engine, switch in advice["settings"].items()
    }
    return {"threshold": advice["threshold"], **said, **settings}


def read_back(document: dict[str, Any]) -> tuple[SweepReport, dict[str, Any]]:
    """The report read from ``document``, and today's writing of it as JSON carries it."""
    report = SweepReport.from_json(document)
    return report, json.loads(json.dumps(report.to_json(), default=float))


def test_a_sweep_report_of_the_previous_format_opens_as_it_was_written():
    document = written("sweep_report_format6.json")
    # The format before today's: a change of format commits a report its predecessor wrote.
    assert document["format_version"] == SweepReport.HISTORY.current - 1
    report, again = read_back(document)
    assert [c["outcomes"] for c in document["checks"]] == [c.outcomes for c in report.checks]
    assert report.checks and report.crossovers and report.caveats
    # Fields added since are written with their defaults, beside what today's writer
    # derives from them (not read back); nothing read is lost.
    for name in SweepReport.DERIVED:
        again.pop(name)
    defaults = {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(SweepReport)
    }
    assert all(again.pop(k) == defaults[k] for k in set(again) - set(document))
    # Each engine setting's launches and source came later within crossover format 3.
    for crossover in again["crossovers"]:
        for setting in crossover["recommendation"]["settings"].values():
            assert setting.pop("launches") == {} and setting.pop("source") == ""
    assert unversioned(again) == unversioned(document)
    assert SweepReport.from_json(document) == report
    assert "stops paying" in describe(report)


def test_a_sweep_report_of_format_5_opens_its_checks_and_recommendations_renamed():
    document = written("sweep_report_format5.json")
    assert document["format_version"] == 5
    report, again = read_back(document)
    # What the old writer derived from its values, today's derives from the values read.
    assert [c["label"] for c in document["comparisons"]] == [c.label for c in report.comparisons]
    assert [c["outcomes"] for c in document["switch_off_checks"]] == [
        c.outcomes for c in report.checks
    ]
    assert report.checks and report.crossovers and report.caveats
    # Nothing read is lost when it is written again in today's format.
    assert again["format_version"] == SweepReport.HISTORY.current
    renamed = copy.deepcopy(
        {("switch_off_checks" if k == "checks" else k): v for k, v in again.items()}
    )
    for found in renamed["crossovers"]:
        found["recommendation"] = as_format_2(found["recommendation"])
    # Fields added since are written with their defaults, beside what is derived from them.
    for name in SweepReport.DERIVED:
        renamed.pop(name)
    defaults = {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(SweepReport)
    }
    assert all(renamed.pop(k) == defaults[k] for k in set(renamed) - set(document))
    assert unversioned(renamed) == unversioned(document)
    assert SweepReport.from_json(again) == report
    assert "stops paying" in describe(report)


def test_a_sweep_report_of_the_first_format_opens_its_crossover_named_anew():
    document = written("sweep_report_format1.json")
    assert document["format_version"] == 1 and "ratio" in document["crossovers"][0]
    report, again = read_back(document)
    (crossover,) = report.crossovers
    assert crossover.effect == document["crossovers"][0]["ratio"]
    assert crossover.statement == document["crossovers"][0]["statement"]
    # Fields added since read with their defaults: no efficiencies, sequences or schedule.
    assert report.efficiencies == [] and report.sequences == [] and report.schedule is None
    # Its verdicts on one launch per arm held apart, as comparisons hold them since.
    assert [c["label"] for c in document["comparisons"]] == [
        "faster (these launches)",
        "slower (these launches)",
    ]
    assert [(c.within_launch, c.finding) for c in report.comparisons] == [
        (Verdict.faster, Verdict.inconclusive),
        (Verdict.slower, Verdict.inconclusive),
    ]
    assert SweepReport.from_json(again) == report


def describe(report: SweepReport) -> str:
    return sweep_description(
        report,
        view_link="v",
        run_link=lambda run_id: run_id,
        plot_link=lambda path: path,
        limit=MAX_TAG,
    )


def broken(change: Any) -> dict[str, Any]:
    document = copy.deepcopy(written("sweep_report_format5.json"))
    change(document)
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.update(format_version=8),
            "sweep report record of format 8: this specexp reads formats 1 to 7",
        ),
        (lambda d: d.pop("format_version"), "sweep report record of format None"),
        (lambda d: d.pop("arms"), "sweep report: lacks 'arms'"),
        (
            lambda d: d["comparisons"][0].update(ratio="fast"),
            r"comparisons\[0\].ratio: expected a number, found 'fast'",
        ),
        (
            lambda d: d["comparisons"][0].update(verdict="better"),
            r"comparisons\[0\].verdict: 'better' is not a Verdict",
        ),
        (lambda d: d["arms"][0]["run"].update(format_version=2), r"a job run record of format 2"),
        (lambda d: d.update(surprise=1), "no field surprise in a SweepReport"),
        (
            lambda d: d["crossovers"][0].update(unreliable={"x": []}),
            r"crossovers\[0\].unreliable: expected an integer key, found 'x'",
        ),
        (
            lambda d: d["arms"][0]["run"].update(times=[1.0]),
            r"arms\[0\].run: run none1: 1 times for 5 values",
        ),
        (lambda d: d["caveats"][0].update(subjects="a"), r"caveats\[0\].subjects: expected a list"),
    ],
)
def test_a_record_that_is_not_one_is_refused_saying_where_and_why(change, message):
    with pytest.raises(RecordError, match=message):
        SweepReport.from_json(broken(change))


def test_the_results_reference_lists_every_record_types_versions_as_the_code_has_them():
    page = (REPO / "docs" / "reference" / "results.md").read_text()
    listed = page.split("## Record formats", 1)[1]
    rows = {
        f"| {kind.HISTORY.record} | {version.number} | {version.added} |"
        for kind in record_types()
        for version in kind.HISTORY.versions
    }
    assert {line for line in listed.splitlines() if line.startswith("| ")} - {
        "| record | format | what it added |"
    } == rows


def test_every_versioned_sweep_report_and_crossover_under_results_opens():
    """The records real sweeps wrote (results/): those from before formats had versions
    (results/h200/default, reference) were never read back and are left as they are."""
    opened = 0
    for path in sorted((REPO / "results").rglob("*.json")):
        document = json.loads(path.read_text())
        if path.name == "sweep_report.json" and "format_version" in document:
            report = SweepReport.from_json(document)
            assert len(report.comparisons) == len(document["comparisons"]), path
            opened += 1
        elif path.name == "crossover.json" and all("format_version" in c for c in document):
            assert [Crossover.from_json(c).statement for c in document] == [
                c["statement"] for c in document
            ]
            opened += 1
    assert opened >= 10
