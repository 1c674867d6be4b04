"""What the engine will run is known before launch: versions it composes for, features a
configuration needs, notes on settings it will take differently, capacity pinned per arm."""

from __future__ import annotations

import pytest

from specexp.job import prepare
from specexp.schemas import ConfigError
from tests.conftest import compose_job, compose_run

KIMI = ("engine=sglang", "model=kimi-k2.5")


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ("stack=cu130", "stack.versions.sglang=banana"),
            "SGLang version 'banana' (declared by stack cu130) is not a version",
        ),
        (
            ("stack=cu130", "stack.versions.sglang=0.4.0"),
            "SGLang 0.4.0 (stack cu130) is older than 0.5.9",
        ),
        (
            ("stack=cu128", "speculative=eagle3", "stack.backports=[]"),
            "needs SGLang >= 0.5.10 (the EAGLE-3 worker calls model.get_embed_and_head()",
        ),
    ],
)
def test_versions_and_features_a_stack_lacks_are_refused_before_launch(overrides, message):
    with pytest.raises(ConfigError) as error:
        prepare(compose_run(*KIMI, *overrides))
    assert message in str(error.value)


def test_a_release_with_the_feature_or_a_declared_backport_is_accepted():
    prepare(compose_run(*KIMI, "stack=cu128", "speculative=eagle3"))  # backport declared
    prepare(
        compose_run(
            *KIMI,
            "stack=cu128",
            "speculative=eagle3",
            "stack.backports=[]",
            "stack.versions.sglang=0.5.10",
        )
    )


def test_an_unknown_version_and_an_untranslatable_knob_are_said_before_launch():
    job = compose_job(*KIMI, "stack=local", "speculative=ngram")
    notes = job.engine.plan_notes(job.server)
    assert any("SGLang version unknown" in n and "spelled for 0.5.23" in n for n in notes)
    assert any("ngram_size=4 has no SGLang 0.5.23 equivalent" in n for n in notes)
    known = compose_job(*KIMI, "stack=cu130", "speculative=ngram")
    assert known.engine.plan_notes(known.server) == []  # 0.5.9 has the n-gram window
    argv = known.engine.launch_spec(known.server, 30000).argv
    assert argv[argv.index("--speculative-ngram-max-match-window-size") + 1] == "4"


def test_every_arm_runs_with_the_same_request_cap():
    caps = set()
    for method in ("none", "eagle3", "ngram"):
        job = compose_job(*KIMI, "stack=cu130", f"speculative={method}")
        argv = job.engine.launch_spec(job.server, 30000).argv
        caps.add(argv[argv.index("--max-running-requests") + 1])
    assert caps == {"64"}  # unset, SGLang would hold the speculative arms to 48
