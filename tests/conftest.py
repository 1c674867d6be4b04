"""Shared helpers and the test tiers.

Tiers, by directory (markers are set here, registered in pyproject.toml):
  tests/unit        fast, no processes: recorded streams, pure logic (`pytest -m unit`)
  tests/statistics  seeded Monte Carlo checks of the statistics, no processes
  tests/process     real processes: llama.cpp, MLflow, Slurm, SGLang's parser, the CLI
"""

from __future__ import annotations

import contextlib
import copy
import filecmp
import functools
import io
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterator

import mlflow
import psutil
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from specexp import api, hydra_app
from specexp.__main__ import main as specexp_main
from specexp.analysis.results import RunKind, RunStatus, Tag
from specexp.core.tinymodels import ensure_pair
from specexp.engines.records import LaunchSpec
from specexp.host.job import Job
from specexp.host.leases import free_port
from specexp.hydra_app import prepare
from specexp.run.session import JobResult
from specexp.serving.server import die_with_parent

# Tests marked engine_server run one at a time on any toolchain (tests/process/conftest.py marks them).
pytest_plugins = ["tests.one_server_at_a_time"]

REPO = Path(__file__).resolve().parent.parent
SERVER_PATTERN = "llama-server|sglang.launch_server|vllm.entrypoints|mlflow ui|mlflow server"
TIERS = ("unit", "statistics", "process")
CONFIG_DIR = hydra_app.CONFIG_DIR
# The small generated pair and short prompt every quick real run starts from...
QUICK = ("model=tiny-pair-small", "workload=short")
# ...and the smallest real run: a few tokens, no warm-up, two measured runs.
TINY = (*QUICK, "workload.max_tokens=32", "stats.warmup_runs=0", "stats.measured_runs=2")


def pytest_collection_modifyitems(items):
    for item in items:
        tier = Path(item.fspath).parent.name
        if tier in TIERS:
            item.add_marker(tier)


def compose_run(*overrides: str):
    """The config `python -m specexp OVERRIDES` would run with: a copy of the test session's
    one composition of these overrides (a tenth of a second each; tests ask for the same
    ones hundreds of times)."""
    return copy.deepcopy(_composed(overrides))


@functools.cache
def _composed(overrides: tuple[str, ...]):
    if not GlobalHydra.instance().is_initialized():
        hydra_app.register()
        initialize_config_dir(
            config_dir=hydra_app.CONFIG_DIR, version_base="1.3"
        )  # once per session: it is slow
    return compose(config_name="config", overrides=list(overrides))


def compose_job(*overrides: str) -> Job:
    """The checked job `python -m specexp OVERRIDES` would run."""
    return prepare(compose_run(*overrides))


def llamacpp_launch(*overrides: str) -> tuple[LaunchSpec, int]:
    """llama-server's command for the small pair on a free port."""
    job = compose_job(*QUICK, *overrides)
    if job.config.model.generate is not None:
        ensure_pair(job.config.model.generate, job.engine.model_format)
    port = free_port()
    return job.command.at(port), port


def runs_in(uri: str, experiment: str = "specexp") -> list:
    """Every run of an experiment, as MLflow's search returns them."""
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


# run_cli's and start_cli's module for `specexp ARGS`, the console script
# (`[project.scripts] specexp = "specexp.cli:main"`), the documented door; their default,
# "specexp", is `python -m specexp OVERRIDES`.
SPECEXP = "specexp.cli"


def start_cli(
    *overrides: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    module: str = "specexp",
    stdout: int = subprocess.PIPE,
    stderr: int = subprocess.PIPE,
) -> subprocess.Popen:
    """`python -m MODULE OVERRIDES` started in the background, as a user would run it."""
    full_env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", module, *overrides],
        cwd=cwd,
        env=full_env,
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def run_cli(
    *overrides: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    module: str = "specexp",
) -> subprocess.CompletedProcess:
    process = start_cli(*overrides, cwd=cwd, env=env, module=module)
    args = process.args
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first: specexp then stops the servers it started (SIGKILL would orphan them).
        process.terminate()
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(
            f"{' '.join(args)} timed out after {timeout} s:\n{stdout[-2000:]}\n{stderr[-2000:]}"
        )
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


@contextlib.contextmanager
def running_in(cwd: Path, env: dict[str, str] | None) -> Iterator[None]:
    """This process in ``cwd`` with ``env`` set, as run_cli starts a command; put back after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for key, value in {"MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}.items():
            patch.setenv(key, value)
        yield


def exit_status(main: Callable[[], int]) -> int:
    """The exit status ``main`` ends with: its return, or the code of the SystemExit it raises
    (argparse's usage errors, ``sys.exit``), 1 where that code is not a number."""
    try:
        return main()
    except SystemExit as stopped:
        return stopped.code if isinstance(stopped.code, int) else 1


def call_main(
    main: Callable[[list[str]], int],
    *args: str,
    cwd: Path,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """A command's ``main(ARGS)`` (``cli.main`` with the subcommand first: `specexp compare
    ARGS`; a band's own, as ``doctor.main``) run in this process, its exit status and printed
    output as run_cli returns them: what a test asserts of a report, without a process's
    seconds of imports (run_cli's tests keep the command line itself covered)."""
    capsys.readouterr()  # what the test printed before is not the command's
    with running_in(cwd, env):
        code = exit_status(lambda: main(list(args)))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([main.__module__, *args], code, out, err)


def specexp_in_process(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    main: Callable[[], int] = specexp_main,
) -> subprocess.CompletedProcess:
    """`python -m specexp ARGS` - the command line's own ``main`` - in this process (with
    ``main=cli.main``, `specexp ARGS`, the console script's): its exit
    status and printed output as run_cli returns them, without the ~4 s a new process spends
    importing specexp, scipy and MLflow. For what a run or sweep does; run_cli's tests keep
    the process itself covered (its exit codes, signals, what a killed one leaves). What the
    command changes of this process is put back: signal handlers, Hydra's global state and
    the logging it configured, the hooks main adds, the environment."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    hooks, environment = list(hydra_app.on_not_run), dict(os.environ)
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    out, err = io.StringIO(), io.StringIO()
    try:
        # Hydra's global state and sys.argv, as the API puts them back after its jobs.
        with (
            api._hydra_session(None, quiet=False),
            running_in(cwd, env),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            sys.argv = ["specexp", *args]
            code = exit_status(main)
    finally:
        hydra_app.on_not_run[:] = hooks
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for handler in set(root.handlers) - set(root_handlers):
            handler.close()
        root.handlers[:], root.level = root_handlers, root_level
        os.environ.clear()
        os.environ.update(environment)
    return subprocess.CompletedProcess(["specexp", *args], code, out.getvalue(), err.getvalue())


def sweep_in_process(*overrides: str, cwd: Path, env: dict[str, str]) -> api.SweepResult:
    """`python -m specexp -m OVERRIDES` as specexp.run_sweep runs it in this process (the
    command line's sweeps are run_cli's tests), tracked in the store ``env`` names, quiet;
    every job finished."""
    with running_in(cwd, env):
        swept = api.run_sweep(list(overrides), quiet=True)
    assert swept.exit_status == 0 and not swept.failed, [j.error for j in swept.failed]
    return swept


def job_in_process(*overrides: str, cwd: Path, env: dict[str, str]) -> JobResult:
    """`python -m specexp OVERRIDES` as specexp.run_job runs it in this process, tracked in
    the store ``env`` names, quiet; the job finished."""
    with running_in(cwd, env):
        result = api.run_job(list(overrides), quiet=True)
    assert result.status == RunStatus.finished, result.error
    return result


def fake_llama_server(tmp_path: Path, *args: str) -> Path:
    """A bin directory (``stack.bin_dir``) whose llama-server is tests/fake_server.py with
    ``args``: a server of known behaviour started, stopped and measured as llama.cpp is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "llama-server"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "if '--version' in sys.argv:\n"
        "    sys.exit(print('version: 0 (test server)'))\n"
        "from tests.fake_server import main\n"
        f"sys.argv += {list(args)!r}\n"
        "main()\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


@contextlib.contextmanager
def mlflow_process(*args: str, cwd: Path) -> Iterator[str]:
    """`mlflow ARGS` (ui or server) on a free loopback port, in its own process group;
    yields its URL once /health answers, stops the whole group after."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", *args, "--host", "127.0.0.1", "--port", str(port)],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,  # gone with the test session, however it ends
        # No job runner: MLflow 3 starts seven huey consumers for it, which the tests do
        # not use and which would outlive a killed test session (grandchildren).
        env={
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                assert process.poll() is None, (
                    f"mlflow {args[0]} exited with code {process.returncode}"
                )
                time.sleep(0.5)
        else:
            pytest.fail(f"mlflow {args[0]} did not answer on {url}")
        yield url
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=30)


# Every process this test session starts inherits this marker, so the stray check sees only
# servers of this session, never those of another run on the same machine.
SESSION_MARKER = "SPECEXP_TEST_SESSION"
os.environ.setdefault(SESSION_MARKER, uuid.uuid4().hex)
# A pytest-xdist worker (`-n 2`) is a session of its own: its servers and its migrated store
# are its own, so that no worker takes another's running servers for strays.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ[SESSION_MARKER] = f"{uuid.uuid4().hex}-{os.environ['PYTEST_XDIST_WORKER']}"


def server_pids() -> set[int]:
    """Servers started by this test session (directly or by the CLI it ran) still running.
    An engine's version probe (`llama-server --version`, which a job runs to record its stack)
    serves nothing: counted, it made two servers of one for a moment."""
    out = subprocess.run(["pgrep", "-f", SERVER_PATTERN], capture_output=True, text=True)
    pids = set()
    for pid in map(int, out.stdout.split()):
        try:
            process = psutil.Process(pid)
            if (
                process.status() != psutil.STATUS_ZOMBIE
                and process.environ().get(SESSION_MARKER) == os.environ[SESSION_MARKER]
                and "--version" not in process.cmdline()
            ):
                pids.add(pid)
        except psutil.Error:
            continue
    return pids


def described(pids: set[int]) -> list[str]:
    """Each process as a stray report needs it: its id, state, parent, age and command."""
    lines = []
    for pid in sorted(pids):
        try:
            process = psutil.Process(pid)
            age = time.time() - process.create_time()
            lines.append(
                f"{pid} ({process.status()}, parent {process.ppid()}, {age:.0f} s old): "
                + " ".join(process.cmdline())[:300]
            )
        except psutil.Error:
            lines.append(f"{pid} (gone)")
    return lines


@pytest.fixture(scope="session", autouse=True)
def no_stray_servers():
    """The suite must stop every server it starts."""
    before = server_pids()
    yield
    _MIGRATED_STORE.unlink(missing_ok=True)
    strays = server_pids() - before
    if strays:
        seen = described(strays)  # before the kill: what they were, and whose
        subprocess.run(["kill", "-9", *map(str, strays)])
        pytest.fail(f"tests left server processes running: {seen}")


_MIGRATED_STORE = (
    Path(tempfile.gettempdir()) / f"specexp-test-store-{os.environ[SESSION_MARKER]}.db"
)


def killed_with_its_servers(process: subprocess.Popen, within_s: float = 90) -> None:
    """SIGKILL a specexp process, then wait up to ``within_s`` for the servers it started,
    which follow their parent (PR_SET_PDEATHSIG), to be gone."""
    process.kill()
    process.communicate(timeout=60)
    deadline = time.monotonic() + within_s
    while server_pids() and time.monotonic() < deadline:
        time.sleep(0.2)


def store_env(directory: Path) -> dict[str, str]:
    """A private MLflow SQLite store in ``directory``: a copy of one created empty once per
    session (creating a store runs MLflow's schema migrations, seconds each time)."""
    if not _MIGRATED_STORE.exists():
        mlflow.MlflowClient(f"sqlite:///{_MIGRATED_STORE}").search_experiments()
    shutil.copyfile(_MIGRATED_STORE, directory / "mlflow.db")
    return {"MLFLOW_TRACKING_URI": f"sqlite:///{directory / 'mlflow.db'}"}


def nothing_tracked(directory: Path) -> bool:
    """The store in ``directory`` is byte for byte as store_env made it (or absent)."""
    store = directory / "mlflow.db"
    return not store.exists() or filecmp.cmp(store, _MIGRATED_STORE, shallow=False)


@pytest.fixture
def tracking_env(tmp_path):
    """A private MLflow store for one test."""
    return store_env(tmp_path)


def is_sweep(run) -> bool:
    return run.data.tags.get(Tag.kind) == RunKind.sweep


def sweep_parent(runs: list):
    """The one sweep parent among ``runs``."""
    (parent,) = [r for r in runs if is_sweep(r)]
    return parent
