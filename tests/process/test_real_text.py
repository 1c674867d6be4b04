"""A trained model on real prompts, through the CLI: Gemma 3 270M on llama.cpp with a few
HumanEval prompts and short outputs, no speculation against an n-gram draft and against
its self-draft (generated and served). Per-request acceptance, the per-category table and
output equality land in the sweep report. Kept cheap: 2 prompts, 24 tokens, one run, no warm-up."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from tests.conftest import runs_in, specexp_in_process, sweep_parent

REAL = (
    "model=gemma3-270m",
    "workload=humaneval",
    "workload.dataset_limit=2",
    "workload.max_tokens=24",
    "engine.threads=1",
    "stats.warmup_runs=0",
    "stats.measured_runs=1",
    "speculative.num_draft_tokens=4",
    # One launch per arm: this is about prompts and outputs (the sequential protocol has
    # its own tests).
    "stats.sequential.enabled=false",
)


def test_gemma_on_humaneval_none_ngram_and_self_draft(tmp_path, tracking_env):
    result = specexp_in_process(
        "-m",
        *REAL,
        "speculative=none,ngram,draft",
        "multirun.baseline='speculative=none'",
        cwd=tmp_path,
        env=tracking_env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    client = MlflowClient(uri)
    runs = runs_in(uri)
    parent = sweep_parent(runs)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 3 and all(r.info.status == "FINISHED" for r in children)
    by_method = {r.data.params["speculative.method"]: r for r in children}

    def prompts(method: str) -> dict:
        path = client.download_artifacts(
            by_method[method].info.run_id, "prompts.json", str(tmp_path)
        )
        return {o["prompt_id"]: o for o in json.loads(open(path).read())["outcomes"]}

    baseline, ngram, draft = prompts("none"), prompts("ngram"), prompts("draft")
    assert sorted(baseline) == ["HumanEval/0", "HumanEval/1"]
    assert all(o["category"] == "code" and o["text"] for o in baseline.values())
    # Per-request draft counts from the server: the self-draft drafts on every prompt.
    assert all(o["drafted"] > 0 and 0 <= o["accepted"] <= o["drafted"] for o in draft.values())
    assert all(o["drafted"] == 0 for o in baseline.values())
    assert any(o["drafted"] > 0 for o in ngram.values())
    report = json.loads(
        open(
            client.download_artifacts(
                parent.info.run_id, "sweep_report/sweep_report.json", str(tmp_path)
            )
        ).read()
    )
    compared = {c["candidate"]: c for c in report["prompt_comparisons"]}
    assert set(compared) == {"speculative=ngram", "speculative=draft"}
    for method, outcomes in (("ngram", ngram), ("draft", draft)):
        c = compared[f"speculative={method}"]
        identical = sum(outcomes[p]["text"] == baseline[p]["text"] for p in baseline)
        assert (c["identical"], c["compared"]) == (identical, 2)
        assert [r["category"] for r in c["rows"]] == ["code"]
        # A divergence is flagged, never hidden.
        assert bool(c["notes"]) == (identical < 2)
    assert "per category" in output and "outputs identical to the baseline's" in output
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "prompts")}
    assert "prompts/acceptance.png" in names
