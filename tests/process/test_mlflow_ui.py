"""A person's view: a real `mlflow ui` on the store, driven in headless Chromium (Playwright)."""

from __future__ import annotations

import os
import shutil

import mlflow
import pytest

from tests.conftest import mlflow_process, run_cli, store_env, sweep_parent

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    env = store_env(tmp)
    result = run_cli(
        "-m",
        "+sweep=cpu_crossover",
        "concurrency.streams=1,2",
        "stats.measured_runs=2",
        "workload.max_tokens=32",
        cwd=tmp,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tmp, env["MLFLOW_TRACKING_URI"]


@pytest.fixture(scope="module")
def mlflow_ui(sweep_store):
    tmp, uri = sweep_store
    with mlflow_process("ui", "--backend-store-uri", uri, "--workers", "1", cwd=tmp) as url:
        yield url


@pytest.fixture(scope="module")
def page(mlflow_ui):
    playwright = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.fail("Chromium is not installed (scripts/install.sh installs Debian's)")
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
        yield browser.new_page(viewport={"width": 1600, "height": 1000})
        browser.close()


def test_parent_children_and_crossover_plot_in_the_ui(sweep_store, mlflow_ui, page, tmp_path):
    _, uri = sweep_store
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("specexp")
    runs = mlflow.search_runs(experiment_names=["specexp"], output_format="list")
    parent = sweep_parent(runs)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 4

    # The runs table (MLflow 3 opens experiments in its GenAI view; ask for model training).
    page.goto(
        f"{mlflow_ui}/#/experiments/{experiment.experiment_id}/runs?workflowType=machine_learning"
    )
    page.get_by_text(parent.info.run_name).first.wait_for(timeout=60000)
    # The parent row expands into its children.
    page.locator("[role=row]", has_text=parent.info.run_name).first.locator("button").first.click()
    for child in children:
        page.get_by_text(child.info.run_name).first.wait_for(timeout=60000)
    page.screenshot(path=str(tmp_path / "runs.png"))

    # The crossover plot renders as an image among the parent's artifacts.
    page.goto(
        f"{mlflow_ui}/#/experiments/{experiment.experiment_id}/runs/{parent.info.run_id}"
        "/artifacts/crossover/crossover.png"
    )
    page.get_by_text("crossover/crossover.png").first.wait_for(timeout=60000)
    page.wait_for_function(
        "() => [...document.images].some(i => i.src.startsWith('blob:') && i.complete "
        "&& i.naturalWidth > 300)",
        timeout=60000,
    )
    page.screenshot(path=str(tmp_path / "crossover.png"))
