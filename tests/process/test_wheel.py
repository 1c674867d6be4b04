"""specexp as a package: the wheel carries conf/ and sweeps/; installed from it (not
editable), both doors run from any folder, with a user's own config folder too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.no_engine_server


def _source_copy(into: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new ones it does not ignore),
    links kept: a build here leaves the shared tree's build/ alone and sees no stale file."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, copy = REPO / name, into / name
        if source.is_symlink() or source.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy, follow_symlinks=False)
    return into


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the wheel installed, not editable. It sees the interpreter's packages
    (specexp's dependencies) but imports its own specexp: the checkout's editable one is
    found only after the venv's (the test checks which one runs)."""
    here = tmp_path_factory.mktemp("wheel")
    source, wheels, venv = _source_copy(here / "source"), here / "wheels", here / "venv"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", wheels, source], check=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
        check=True,
    )
    (wheel,) = wheels.glob("specexp-*.whl")
    subprocess.run(
        [*pip, "--python", venv / "bin/python", "install", "--no-deps", "--no-index", wheel],
        check=True,
    )
    with zipfile.ZipFile(wheel) as packed:
        carried = {n.removeprefix("specexp/conf/") for n in packed.namelist() if "/conf/" in n}
    ours = {str(p.relative_to(REPO / "conf")) for p in (REPO / "conf").rglob("*") if p.is_file()}
    ours |= {f"sweep/{p.name}" for p in (REPO / "sweeps").iterdir()}
    assert carried == ours
    return venv


def _in(folder: Path, *command: str | Path) -> subprocess.CompletedProcess:
    """A command run in ``folder``, nothing of the checkout on its path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    return subprocess.run(
        [str(part) for part in command], cwd=folder, env=env, capture_output=True, text=True
    )


def test_the_installed_wheel_runs_from_any_folder_with_a_users_configs(installed, tmp_path):
    specexp, python = installed / "bin/specexp", installed / "bin/python"
    said = _in(tmp_path, specexp, "--version")
    site = next((installed / "lib").glob("python3*/site-packages"))
    assert said.returncode == 0 and f" from {site / 'specexp'} " in said.stdout, said.stdout

    own = tmp_path / "own"
    (own / "model").mkdir(parents=True)
    small = (REPO / "conf/model/tiny-pair-small.yaml").read_text()
    (own / "model/mine.yaml").write_text(small.replace("name: tiny-pair-small", "name: mine"))
    door = {
        "python -m specexp": _in(tmp_path, python, "-m", "specexp", "dry_run=true"),
        "specexp run --config-dir": _in(
            tmp_path, specexp, "run", "--config-dir", own, "model=mine", "dry_run=true"
        ),
        "specexp run hydra.searchpath": _in(
            tmp_path,
            specexp,
            "run",
            f"hydra.searchpath=[file://{own}]",
            "model=mine",
            "dry_run=true",
        ),
    }
    for name, ran in door.items():
        assert ran.returncode == 0, f"{name}:\n{ran.stdout[-2000:]}\n{ran.stderr[-2000:]}"
    assert "gemma3-270m.gguf" in door["python -m specexp"].stdout
    for name in ("specexp run --config-dir", "specexp run hydra.searchpath"):
        assert " model=mine " in door[name].stdout and "/tiny-pair-" in door[name].stdout
    # The validator of the installed copy knows the user's options.
    typo = _in(tmp_path, python, "-m", "specexp", "-cd", own, "model=mne")
    assert typo.returncode == 2 and "did you mean 'mine'?" in typo.stdout, typo.stdout
