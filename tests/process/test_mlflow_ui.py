"""A person's view: a real sweep, a real `mlflow ui` on its store, driven in headless Chromium
(Playwright) the way a new user would follow what specexp prints. Screenshots of every page
are kept as test artifacts under $SPECEXP_TEST_ARTIFACTS (default test-artifacts/)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import mlflow
import pytest

from tests.conftest import (
    REPO,
    mlflow_process,
    specexp_in_process,
    store_env,
    sweep_parent,
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(os.environ.get("SPECEXP_TEST_ARTIFACTS", REPO / "test-artifacts")) / "mlflow-ui"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """`+sweep=cpu_crossover` at two levels; the store, what it printed, the runs."""
    tmp = tmp_path_factory.mktemp("ui")
    env = store_env(tmp)
    result = specexp_in_process(
        "-m",
        "+sweep=cpu_crossover",
        "concurrency.streams=1,2",
        "stats.measured_runs=2",
        "workload.max_tokens=32",
        cwd=tmp,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    runs = mlflow.search_runs(experiment_names=["specexp"], output_format="list")
    parent = sweep_parent(runs)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4
    return tmp, env["MLFLOW_TRACKING_URI"], " ".join(result.stdout.split()), parent, children


@pytest.fixture(scope="module")
def ui(sweep):
    tmp, uri, *_ = sweep
    with mlflow_process("ui", "--backend-store-uri", uri, "--workers", "1", cwd=tmp) as url:
        yield url


@pytest.fixture(scope="module")
def page(ui):
    playwright = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.fail("Chromium is not installed (scripts/install.sh installs Debian's)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser.new_page(viewport={"width": 1920, "height": 1200})
        browser.close()


def scrolled_to(page, text: str, steps: int = 80) -> bool:
    """Scroll the page's scrolling panes (the compare view lists its metrics in one) until
    ``text`` is among what they render."""
    for _ in range(steps):
        if page.get_by_text(text, exact=True).count():
            return True
        page.evaluate(
            "() => document.querySelectorAll('*').forEach(e => "
            "{ if (e.scrollHeight > e.clientHeight + 10) e.scrollTop += 200 })"
        )
        page.wait_for_timeout(100)
    return False


def shot(page, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_the_link_specexp_prints_opens_the_sweeps_jobs_with_the_benchmark_columns(sweep, ui, page):
    _, _, printed, parent, children = sweep
    match = re.search(r"ADDRESS/(#/experiments/\S+)", printed)  # specexp ui prints ADDRESS
    assert match, printed[-2000:]
    page.goto(f"{ui}/{match.group(1)}")
    for child in children:
        page.get_by_text(child.info.run_name).first.wait_for(timeout=60000)
    # The runs table of model training, not MLflow 3's GenAI pages.
    page.get_by_role("link", name="Model registry").wait_for(timeout=10000)
    assert page.get_by_text("Evaluation runs").count() == 0
    headers = " ".join(page.locator("[role=columnheader]").all_inner_texts())
    for column in (
        "factor.speculative",
        "factor.concurrency.streams",
        "tok_per_s_mean",
        "tok_per_s_ci_low",
        "tok_per_s_ci_high",
        "verdict",
        "engaged",
    ):
        assert column in headers, headers
    # The sweep's jobs only, flat (no parent row), each with its verdict.
    cells = [c.strip() for c in page.locator("[role=gridcell]").all_inner_texts()]
    assert parent.info.run_name not in cells
    assert sum(c.endswith(tuple(r.info.run_name for r in children)) for c in cells) == 4
    assert cells.count("baseline") == 2
    shot(page, "sweep_jobs")


def test_the_sweeps_description_carries_its_report_and_the_crossover_plot(sweep, ui, page):
    _, uri, _, parent, children = sweep
    experiment = mlflow.get_experiment_by_name("specexp")
    page.goto(
        f"{ui}/#/experiments/{experiment.experiment_id}/runs/{parent.info.run_id}"
        "?workflowType=machine_learning"
    )
    page.get_by_text("Crossover:").first.wait_for(timeout=60000)
    page.get_by_text("Show more").first.click()
    for child in children:  # every job, a link to its run
        link = page.get_by_role("link", name=child.info.run_name)
        assert child.info.run_id in (link.first.get_attribute("href") or "")
    description = page.get_by_text("Verdicts").first.locator("xpath=../..").inner_text()
    assert "baseline" in description and "Caveats" in description
    page.wait_for_function(
        "() => [...document.images].some(i => i.src.includes('get-artifact') && i.complete "
        "&& i.naturalWidth > 300)",
        timeout=60000,
    )
    shot(page, "sweep_description")
    # The per-level series chart against the level (the step).
    page.get_by_role("tab", name="Model metrics").click()
    page.get_by_text("speedup_pct/speculative-draft").first.wait_for(timeout=60000)
    shot(page, "sweep_charts")


def test_compare_view_and_experiment_show_verdicts_intervals_and_views(sweep, ui, page):
    _, _, _, _, children = sweep
    experiment = mlflow.get_experiment_by_name("specexp")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    ids = json.dumps([c.info.run_id for c in children])
    page.goto(f'{ui}/#/compare-runs?runs={ids}&experiments=["{experiment.experiment_id}"]')
    page.get_by_text("Run details").first.wait_for(timeout=60000)
    for name in ("tok_per_s_ci_low", "tok_per_s_ci_high", "speedup_pct", "speedup_ci_low_pct"):
        assert scrolled_to(page, name), f"{name} not in the compare view's metrics"
    rows = {
        cells[0]: cells[1:]
        for cells in (r.split() for r in page.locator("tr").all_inner_texts())
        if cells
    }
    assert rows["verdict"].count("baseline") == 2 and rows["engaged"] == ["yes"] * 4
    page.get_by_text("verdict", exact=True).first.scroll_into_view_if_needed()
    shot(page, "compare_view")
    # The experiment's own page: its description links the benchmark view, and the saved
    # views (the benchmark view, the sweep's) are listed by name.
    page.goto(f"{ui}/#/experiments/{experiment.experiment_id}?workflowType=machine_learning")
    page.get_by_role("link", name="Benchmark view").wait_for(timeout=60000)
    page.get_by_role("button", name="Views").click()
    page.get_by_text("specexp: configurations and results").first.wait_for(timeout=10000)
    page.get_by_text(
        re.compile(r"sweep [0-9a-f]{8}: speculative x concurrency\.streams")
    ).first.wait_for(timeout=10000)
    shot(page, "experiment_views")
