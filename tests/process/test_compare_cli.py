"""Real A/B and A/A on llama.cpp, compared with `python -m specexp.compare`: its terminal
table and MLflow artifacts by the command line; its other reports by its main function in this
process, on sweeps run there too (the command line's sweeps are tests/process/test_cli.py's
and test_drift.py's)."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from specexp import cli
from specexp.analysis.results import RunKind, Tag
from specexp.core.notes import NoteKind
from tests.conftest import QUICK as BASE
from tests.conftest import call_main, job_in_process, run_cli, store_env, sweep_in_process

QUICK = [*BASE, "stats.warmup_runs=1", "workload.max_tokens=64"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store with an A/B (speculative none vs draft) and an A/A (none twice) on llama.cpp."""
    tmp = tmp_path_factory.mktemp("compare")
    env = store_env(tmp)
    sweep_in_process(
        *QUICK,
        "stats.measured_runs=5",
        "speculative=none,draft",
        # One launch per arm (the sweep would measure until decided): what compare makes of
        # single launches is what is tested here.
        "stats.sequential.enabled=false",
        "tracking.experiment=ab",
        cwd=tmp,
        env=env,
    )
    sweep_in_process(
        *QUICK,
        "stats.launches=2",
        "stats.measured_runs=3",
        "replicate=0,1",
        "tracking.experiment=aa",
        cwd=tmp,
        env=env,
    )
    return tmp, env


def compare(store, capsys, *args):
    """`specexp compare ARGS`'s report, by the command line's main in this process."""
    tmp, env = store
    return call_main(cli.main, "compare", *args, cwd=tmp, env=env, capsys=capsys)


# The A/B experiment, its baseline and the label compare names its arms by.
AB = ("--experiment", "ab", "--baseline", "speculative=none", "--label", "speculative")


def test_ab_gives_a_verdict_with_ci_and_p_values(store, capsys):
    result = compare(
        store,
        capsys,
        *AB,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (comparison,) = document["comparisons"]
    assert comparison["candidate"] == "speculative=draft"
    # One launch per arm and no calibration run in the experiment: what the runs say is
    # kept apart, and the verdict, which must hold across launches, cannot say it - whichever
    # way the runs point (on a quiet machine the draft is faster within the launch; a loaded
    # CI machine may leave it undecided, so the direction itself is not asserted).
    assert comparison["verdict"] == "inconclusive"
    assert comparison["launches_only"] is True
    assert any(note["kind"] == "these launches only" for note in comparison["notes"])
    low, ratio, high = comparison["ci_low"], comparison["ratio"], comparison["ci_high"]
    assert 0 < low < ratio < high
    undecided = ("inconclusive", "equivalent")
    expected = ("faster",) if low > 1 else ("slower",) if high < 1 else undecided
    assert comparison["within_launch"] in expected
    assert 0 <= comparison["p_welch"] <= 1 and 0 < comparison["p_mannwhitney"] < 1
    assert comparison["mde"] > 0
    assert (
        comparison["runs_needed"] is None or comparison["runs_needed"] >= 2
    )  # None: beyond 10,000 runs


def test_ab_table_in_terminal_and_artifacts_in_mlflow(store):
    tmp, env = store
    result = run_cli(
        *AB,
        cwd=tmp,
        env=env,
        module="specexp.compare",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # Single launches: the verdict is inconclusive, what their runs say stands beside it.
    # (Headers may wrap over two lines in a narrow terminal.)
    assert all(
        word in result.stdout for word in ("inconclusive", "ratio CI", "p Welch", "(Bonferroni)")
    ), result.stdout
    run_id = result.stdout.strip().splitlines()[-1].split()[-1]
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    assert client.get_run(run_id).data.tags[Tag.kind] == RunKind.comparison
    names = {a.path for a in client.list_artifacts(run_id, "comparison")}
    assert names == {
        "comparison/comparison.md",
        "comparison/comparison.json",
        "comparison/comparison.png",
    }
    markdown = open(client.download_artifacts(run_id, "comparison/comparison.md", str(tmp))).read()
    assert "| speculative=draft |" in markdown and "inconclusive" in markdown


def test_aa_is_never_faster_or_slower(store, capsys):
    # Per-launch means (2 launches x 3 runs per arm). At 99.999% confidence a real A/A almost
    # never crosses: a false verdict here would be a 1-in-100,000 event or a bias in the method
    # (the rate at 95% is the Monte Carlo's: tests/statistics/test_launch_variance.py).
    result = compare(
        store,
        capsys,
        "--experiment",
        "aa",
        "--baseline",
        "replicate=0",
        "--label",
        "replicate",
        "--confidence",
        "0.99999",
        "--json",
        "--no-log",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] in ("equivalent", "inconclusive")
    assert all(arm["unit"] == "launch" and arm["summary"]["n"] == 2 for arm in document["arms"])


def test_baseline_must_match_one_run(store, capsys):
    result = compare(store, capsys, "--experiment", "ab", "--baseline", "speculative=eagle3")
    assert result.returncode == 2
    assert "baseline 'speculative=eagle3' matched no run" in result.stdout


def test_reproduction_report_says_hardware_differs(store, capsys):
    tmp, env = store
    swept = sweep_in_process(
        *QUICK,
        "stats.measured_runs=2",
        # Short runs, no warm-up: the report's claims are judged by direction, whichever.
        "stats.warmup_runs=0",
        "workload.max_tokens=32",
        "tracking.experiment=repro",
        "+sweep=reference_cpu",
        # One launch per stand-in: what the report says of them is tested here (the
        # sequential protocol has its own tests).
        "stats.sequential.enabled=false",
        cwd=tmp,
        env=env,
    )
    # The sweep's own report compares every case with its baseline, the older stack's two
    # too (at 2ac0bae it paired runs by stack and held two), each side's stack shown.
    assert swept.report is not None
    sides = {s.candidate: (s.baseline_stack, s.candidate_stack) for s in swept.report.sides}
    assert len(sides) == len(swept.report.comparisons) == 4
    assert sides["cpu_case=graph-reuse-off-draft-costs"] == ("local", "llamacpp-graph-reuse-off")
    result = compare(store, capsys, "--experiment", "repro", "--reference", "cuda13_story")
    assert result.returncode == 0, result.stderr
    assert "Hardware differs" in result.stdout and "cannot be judged here" in result.stdout
    assert "judged as ratios between configurations" in result.stdout
    document = json.loads(
        compare(
            store,
            capsys,
            "--experiment",
            "repro",
            "--reference",
            "cuda13_story",
            "--json",
            "--no-log",
        ).stdout
    )
    reproduction = document["reproduction"]
    assert reproduction["hardware_matches"] is False
    statuses = {c["id"]: c["status"] for c in reproduction["claims"]}
    assert set(statuses) == {
        "stack-upgrade",
        "eagle3-net-positive",
        "eagle3-liability-cu128",
        "triton-default",
        "eagle3-vs-old-baseline",
    }
    assert all(
        s in ("reproduced", "contradicted", "inconclusive", "not measured")
        for s in statuses.values()
    )
    # Every claim is measured by a stand-in, by direction only; the stack upgrade's (graph
    # reuse off against on, one binary) says what it cannot tell.
    texts = {c["id"]: c["text"] for c in reproduction["claims"]}
    for claim in statuses:
        assert statuses[claim] != "not measured" and "by direction only" in texts[claim], claim
    assert "(llamacpp-graph-reuse-off" in texts["stack-upgrade"]
    assert "nothing about the published stacks themselves" in texts["stack-upgrade"]


def test_a_calibration_run_gives_single_launch_arms_a_verdict_beyond_their_launches(store, capsys):
    """A run with 3 launches of the same server family (engine, model, stack, hardware) in
    the experiment: single-launch comparisons are tested against its launch variance, once
    it is checked against each arm's run-to-run spread (an A/A: a draft arm's spread is not
    the baseline's)."""
    tmp, env = store
    sweep_in_process(
        *QUICK,
        "stats.measured_runs=3",
        "replicate=0,1",
        "multirun.reuse_servers=false",
        "stats.sequential.enabled=false",  # single-launch arms
        "tracking.experiment=calibrated",
        cwd=tmp,
        env=env,
    )
    job_in_process(
        *QUICK,
        "stats.launches=3",
        "stats.measured_runs=3",
        "tracking.experiment=calibrated",
        cwd=tmp,
        env=env,
    )
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name("calibrated").experiment_id
    single = [
        r.info.run_id
        for r in client.search_runs([experiment])
        if r.data.tags.get(Tag.kind) == RunKind.job and r.data.metrics.get("launches") == 1.0
    ]
    result = compare(
        store,
        capsys,
        "--experiment",
        "calibrated",
        "--run-ids",
        *single,
        "--baseline",
        "replicate=0",
        "--label",
        "replicate",
        "--json",
        "--no-log",
    )
    assert result.returncode == 0, result.stderr
    (comparison,) = json.loads(result.stdout)["comparisons"]
    notes = {n["kind"]: n["message"] for n in comparison["notes"]}
    # The calibration is found and checked against each arm. Its F test (1% per arm) refuses
    # a calibration that applies about 2% of the time, by design, and one whose 3 launches
    # spread no more than their runs (a launch variance of 0) is refused: those rates are
    # the seeded Monte Carlo's (tests/statistics/test_launch_variance.py); here either
    # outcome must be carried through to the comparison as the CLI reports it.
    if comparison["launches_only"]:
        refusal = notes[NoteKind.calibration_refused]
        assert "F test" in refusal or "launch-to-launch variance measured 0" in refusal
    else:
        assert "launch-to-launch variance of calibration runs" in notes[NoteKind.launch_variance]
        assert comparison["df"] == 2.0  # one calibration run of 3 launches
