"""docs/reference/results.md against the code: every tag, metric and artifact name a run can
hold is listed on the page, and the page lists no name the code lacks.

The code's names come from the code itself: the ``Tag``, ``Metric`` and ``Artifact`` enums of
specexp/analysis/results.py and ``Hardware`` of specexp/host/capture.py, the tags ``run_tags``
writes (read from its source), and the metrics the pure functions a job logs through return
for a synthetic job that has every kind of figure (a run's metrics, the job's summary, the machine's
telemetry, the server's accounting, an SLO). Families of names are written with a
placeholder on the page (``stack.<name>``, ``gpu<N>_power_w``) and compared as such."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np

from specexp.analysis import results
from specexp.analysis.results import SERVER_ACCOUNTING, Artifact, Metric, Tag
from specexp.analysis.summary import run_metrics, summarize_job
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.schemas.slo import SloConfig
from specexp.host import telemetry
from specexp.host.capture import Hardware
from tests.conftest import REPO

PAGE = REPO / "docs" / "reference" / "results.md"
# Markdown links and images: ``[text](target)``.
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Requests per synthetic run.
REQUESTS = 200


def family(name: str) -> str:
    """A name with its variable parts as one placeholder: ``gpu0_power_w`` and
    ``gpu<N>_power_w`` are both ``gpu<>_power_w``."""
    return re.sub(r"<[^>]*>", "<>", re.sub(r"^gpu\d+_", "gpu<N>_", name))


def literal_keys(path: Path, function: str) -> set[str]:
    """The tag names a function of ``path`` writes as literals: dict keys, keyword arguments
    of ``update`` and subscript assignments; an f-string key as its family."""
    tree = ast.parse(path.read_text())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    keys: list[ast.expr] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Dict):
            keys += [k for k in sub.keys if k is not None]
        elif isinstance(sub, ast.DictComp):
            keys.append(sub.key)
        elif isinstance(sub, ast.Call) and getattr(sub.func, "attr", "") == "update":
            keys += [ast.Constant(k.arg) for k in sub.keywords if k.arg]
        elif isinstance(sub, ast.Assign):
            keys += [t.slice for t in sub.targets if isinstance(t, ast.Subscript)]
    names = set()
    for key in keys:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            names.add(key.value)
        elif isinstance(key, ast.JoinedStr) and isinstance(key.values[0], ast.Constant):
            names.add(f"{key.values[0].value}<>")
    return names


def code_tags() -> set[str]:
    prefixes = (
        results.STACK,
        results.STACK_VERSION,
        results.EFFECTIVE,
        results.ENGAGED,
        results.FACTOR,
    )
    return (
        {str(t) for t in Tag}
        | {f"{p}<>" for p in prefixes}
        | literal_keys(REPO / "specexp/tracking/observer.py", "run_tags")
        | {str(t) for t in Hardware}
    )


def synthetic_job() -> list[RunResult]:
    """Two measured runs with every figure a run can have: enough requests, with latencies
    in no order, for every tail percentile's interval (p99 needs 368 effective values)."""
    gpu = telemetry.GpuSample(0, 1980.0, 3201.0, 300.0, 60.0, 90.0, 1000.0)
    latencies = np.random.default_rng(0).uniform(0.05, 0.15, size=(2, REQUESTS, 10))
    runs = []
    for index in range(2):
        records = [
            RequestRecord(
                run=index,
                stream=0,
                warmup=False,
                start_unix=100.0 + index,
                ok=True,
                ttft_s=float(latencies[index, k, 0]),
                e2e_s=1.0 + index / 10,
                output_tokens=10,
                itl_s=latencies[index, k, 1:].tolist(),
                chunk_gaps_s=latencies[index, k, 1:].tolist(),
                due_s=float(k),
                send_lag_s=0.0,
            )
            for k in range(REQUESTS)
        ]
        runs.append(
            RunResult(
                run=index,
                warmup=False,
                wall_s=1.5,
                records=records,
                counter_deltas={},
                telemetry=telemetry.summarize([telemetry.Sample(1.0, 1.0, 0.0, (gpu,))]),
                asked_rate=2.0,
            )
        )
    return runs


def code_metrics() -> set[str]:
    runs = synthetic_job()
    accounting = {name: 1.0 for name in SERVER_ACCOUNTING}
    slo = SloConfig(name="test", ttft_s=1.0)
    per_run = run_metrics(runs[0], accounting, slo)
    job = summarize_job(
        runs,
        confidence=0.95,
        cv_warn=0.05,
        idle_timeout_s=30.0,
        accounting=accounting,
        cores=2,
        slo=slo,
    )
    return {str(m) for m in Metric} | set(per_run) | set(job.metrics)


def page_names(section: str) -> set[str]:
    """The names in the first column of the tables of one ``## section`` of the page."""
    text = PAGE.read_text()
    body = text[text.index(f"\n## {section}\n") :].split("\n## ", 2)[1]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split("|")[1])}


def compare(section: str, code: set[str]) -> None:
    page = {family(n) for n in page_names(section)}
    code = {family(n) for n in code}
    assert not code - page, (
        f"in the code, missing from {PAGE.name} ({section}): {sorted(code - page)}"
    )
    assert not page - code, f"on {PAGE.name} ({section}), not in the code: {sorted(page - code)}"


def test_every_tag_is_on_the_reference_page_and_no_other():
    compare("Tags", code_tags())


def test_every_metric_is_on_the_reference_page_and_no_other():
    compare("Metrics", code_metrics())


def test_every_artifact_is_on_the_reference_page_and_no_other():
    compare("Artifacts", {str(a) for a in Artifact})


def test_the_sweep_artifacts_the_page_names_are_written_by_the_code():
    """The parent run's files are named where they are written (specexp/tracking/publish.py,
    with the folder names store.py shares with the reader): each one the page names is a
    literal there, or a report's ``f"{folder}.<ext>"``, under a folder named as a literal."""
    source = "".join(
        (REPO / "specexp/tracking" / name).read_text() for name in ("publish.py", "store.py")
    )
    named = page_names("Artifacts of a sweep or comparison")
    assert len(named) >= 10
    for name in named:
        folder, file = name.split("/")
        stem, ext = file.rsplit(".", 1)
        report = stem == folder and f'f"{{folder}}.{ext}"' in source
        assert f'"{folder}"' in source and (f'"{file}"' in source or report), name


def test_the_readme_is_short_and_nothing_links_outside_the_repository():
    """The README is a front door (at most 300 lines of at most 120 characters); every
    relative link of it, of the pages and of the results resolves to a file of the
    repository (the shared reference the project once pointed to is folded into docs/)."""
    readme = (REPO / "README.md").read_text().splitlines()
    assert len(readme) <= 300
    assert [n for n, line in enumerate(readme, 1) if len(line) > 120] == []
    documents = [
        REPO / "README.md",
        *(REPO / "docs").rglob("*.md"),
        *(REPO / "results").rglob("*.md"),
    ]
    for document in documents:
        text = document.read_text()
        assert "../shared" not in text, document
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "#")):
                continue
            path = (document.parent / target.split("#")[0]).resolve()
            assert path.is_relative_to(REPO) and path.exists(), f"{document}: {target}"
