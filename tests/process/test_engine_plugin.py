"""Adding an engine is one folder and one config: a fourth engine, added to a copy of the
tree as exactly a folder of one module and a config group file, composes, dry-runs and lands a finished MLflow run. Its
server is the fake llama.cpp-protocol server (a test double: the point is the wiring)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

from tests.conftest import REPO, run_cli, runs_in, store_env

ENGINE_MODULE = textwrap.dedent('''\
    """A fourth engine: a server speaking llama.cpp's /completion protocol."""

    from __future__ import annotations

    import sys
    from dataclasses import dataclass
    from typing import Any

    from specexp.core.schemas.engine import EngineConfig, ServerSettings
    from specexp.core.schemas.workload import WorkloadConfig
    from specexp.engines.base import Engine
    from specexp.engines.records import PORT, ServerCommand, StreamChunk


    @dataclass
    class EchoConfig(EngineConfig):
        name: str = "echo"
        itl_ms: float = 1.0


    class EchoEngine(Engine[EchoConfig]):
        name = "echo"
        config_class = EchoConfig
        multi_gpu = False

        def server_command(self, server: ServerSettings[EchoConfig]) -> ServerCommand:
            argv = (sys.executable, "-m", "tests.fake_server", "--host", server.engine.host, "--port", PORT,
                    "--itl-ms", str(server.engine.itl_ms))
            return ServerCommand(argv, {})

        def completion_request(self, server: ServerSettings[EchoConfig], workload: WorkloadConfig,
                               prompt: str) -> tuple[str, dict[str, Any]]:
            return "/completion", {"prompt": prompt, "n_predict": workload.max_tokens, "stream": True}

        def parse_event(self, event: dict[str, Any]) -> StreamChunk:
            done = bool(event.get("stop"))
            final = {"completion_tokens": event.get("tokens_predicted")} if done else {}
            return StreamChunk(tokens_so_far=event.get("tokens_predicted"), done=done, final=final)
''')
ENGINE_CONFIG = "# The fourth engine.\ndefaults:\n  - echo_schema\n"


def test_a_fourth_engine_is_one_folder_and_one_config(tmp_path):
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__")
    for part in (
        "specexp",
        "conf",
        "sweeps",
        "hydra_plugins",
        "tests/__init__.py",
        "tests/fake_server.py",
    ):
        copy = shutil.copytree if (REPO / part).is_dir() else shutil.copy
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        # Links kept: specexp/conf is the tree's own conf/, where the fourth engine's config goes.
        tree_options = {"ignore": ignore, "symlinks": True}
        copy(REPO / part, tree / part, **(tree_options if copy is shutil.copytree else {}))
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "three engines"], check=True)

    (tree / "specexp/engines/echo").mkdir()
    (tree / "specexp/engines/echo/__init__.py").write_text(ENGINE_MODULE)
    (tree / "conf/engine/echo.yaml").write_text(ENGINE_CONFIG)
    subprocess.run([*git, "add", "-A"], check=True)
    numstat = subprocess.run(
        [*git, "diff", "--cached", "--numstat"], capture_output=True, text=True
    ).stdout
    changes = {line.split()[2]: int(line.split()[0]) for line in numstat.splitlines()}
    assert set(changes) == {"specexp/engines/echo/__init__.py", "conf/engine/echo.yaml"}
    assert sum(changes.values()) == 41  # docs/design.md quotes this diff

    env = {"PYTHONPATH": str(tree), **store_env(tmp_path)}
    dry = run_cli("engine=echo", "dry_run=true", cwd=tree, env=env, timeout=120)
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert f"{sys.executable} -m tests.fake_server --host 127.0.0.1 --port" in dry.stdout
    refused = run_cli("engine=echo", "speculative=ngram", cwd=tree, env=env, timeout=120)
    assert (
        refused.returncode == 2
        and "speculative=ngram is not supported by engine=echo" in refused.stdout
    )

    result = run_cli(
        "engine=echo",
        "workload=short",
        "workload.max_tokens=64",
        "stats.warmup_runs=0",
        "stats.measured_runs=3",
        cwd=tree,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run,) = runs_in(env["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FINISHED" and run.data.tags["engine"] == "echo"
    assert run.data.metrics["tok_per_s_mean"] > 0 and run.data.params["engine.itl_ms"] == "1.0"
