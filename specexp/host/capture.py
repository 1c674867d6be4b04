"""What hardware a run measured on, recorded as tags so results are compared like for like."""

from __future__ import annotations

import inspect
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from enum import StrEnum
from functools import lru_cache
from typing import Any, Iterable, Mapping, Optional, Protocol

from specexp.core.schemas.engine import ServerSettings
from specexp.engines.stack import stack_env, stack_python
from specexp.host.leases import command_output


class StackEngine(Protocol):
    """What a stack capture needs of an engine (the capture owns this interface)."""

    @property
    def runs_on_torch(self) -> bool: ...
    @property
    def stack_packages(self) -> Mapping[str, str]: ...
    @property
    def runs_in_stack_python(self) -> bool: ...

    def version(self, server: ServerSettings[Any]) -> tuple[Optional[str], str]: ...


# Read in every stack, whatever the engine: {distribution: tag key}.
_COMMON_PACKAGES = {"torch": "torch", "triton": "triton"}


class Hardware(StrEnum):
    """The tags a run's hardware is recorded under (:func:`hardware`)."""

    # In one phrase: "2x NVIDIA H200", or "CPU: <model> (<count> cores)".
    hardware = "hardware"
    cpu_model = "cpu_model"
    cpu_count = "cpu_count"
    gpu_count = "gpu_count"
    gpu_name = "gpu_name"
    gpu_compute_capability = "gpu_compute_capability"
    # With several GPUs: how each pair is linked (JSON), and what the slowest pair crosses.
    gpu_links = "gpu_links"
    gpu_interconnect = "gpu_interconnect"


@lru_cache(maxsize=1)
def hardware() -> dict[str, str]:
    """GPU model and count (via nvidia-smi when present), CPU model and core count."""
    tags = {
        Hardware.cpu_model: _cpu_model(),
        Hardware.cpu_count: str(os.cpu_count() or 0),
        Hardware.gpu_count: "0",
        Hardware.gpu_name: "",
    }
    if shutil.which("nvidia-smi"):
        out = command_output(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]
        )
        rows = [line.split(",") for line in (out or "").strip().splitlines() if line.strip()]
        if rows:
            tags[Hardware.gpu_count] = str(len(rows))
            tags[Hardware.gpu_name] = rows[0][0].strip()
            tags[Hardware.gpu_compute_capability] = rows[0][-1].strip()
    if int(tags[Hardware.gpu_count]) > 1:
        links = gpu_links(command_output(["nvidia-smi", "topo", "-m"]) or "")
        if links:
            tags[Hardware.gpu_links] = json.dumps(links, sort_keys=True)
            tags[Hardware.gpu_interconnect] = interconnect(links.values())
    tags[Hardware.hardware] = (
        f"{tags[Hardware.gpu_count]}x {tags[Hardware.gpu_name]}"
        if tags[Hardware.gpu_count] != "0"
        else f"CPU: {tags[Hardware.cpu_model]} ({tags[Hardware.cpu_count]} cores)"
    )
    return {str(k): v for k, v in tags.items()}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def gpu_links(topology: str) -> dict[str, str]:
    """Each pair of GPUs and how ``nvidia-smi topo -m`` says they are linked: {"0-1": "NV18",
    "0-2": "SYS", ...} (NV#: # bonded NVLinks; PIX, PXB, PHB, NODE, SYS: PCIe paths, each
    wider than the last). Empty when there is no matrix of several GPUs to read."""
    lines = [_ANSI.sub("", line) for line in topology.splitlines()]
    header = next((line.split("\t") for line in lines if line.startswith("\tGPU")), None)
    if header is None:
        return {}
    columns = [c.strip() for c in header]
    links = {}
    for line in lines:
        cells = [c.strip() for c in line.split("\t")]
        if not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = int(cells[0][3:])
        for column, value in zip(columns[1:], cells[1:], strict=False):
            match = re.fullmatch(r"GPU(\d+)", column)
            if match and int(match[1]) > row:
                links[f"{row}-{match[1]}"] = value
    return links


def interconnect(links: Iterable[str]) -> str:
    """ "nvlink" when every pair is NVLinked, else "pcie" (what the slowest pair crosses)."""
    return "nvlink" if all(link.startswith("NV") for link in links) else "pcie"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _interpreter_facts(packages: dict, torch: bool) -> dict:
    """The interpreter's version, the ``packages`` (distribution: key) it holds, and with
    ``torch`` what torch sees of CUDA and the GPUs. Self-contained: run as a program in the
    stack's interpreter (_PROBE), or called here when that interpreter is this one."""
    import importlib.metadata as md  # noqa: PLC0415 - self-contained (see above)
    import platform  # noqa: PLC0415
    import sys  # noqa: PLC0415

    info = {"python": platform.python_version(), "python_executable": sys.executable}
    for dist, key in packages.items():
        try:
            info[key] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    if torch:
        try:
            import torch as module  # noqa: PLC0415 - seconds: only for a torch stack

            info["torch_cuda"] = str(module.version.cuda)
            if module.cuda.is_available():
                info["gpu_count"] = str(module.cuda.device_count())
                info["gpu_name"] = module.cuda.get_device_name(0)
                major, minor = module.cuda.get_device_capability(0)
                info["gpu_compute_capability"] = f"{major}.{minor}"
                info["nccl"] = ".".join(map(str, module.cuda.nccl.version()))
        except Exception as exc:
            info["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return info


# Runs in the stack's own interpreter with the stack's variables: what it can import is what
# the server will run with, whatever specexp's own environment holds.
_PROBE = (
    inspect.getsource(_interpreter_facts)
    + "\nimport json, sys\n"
    + "print(json.dumps(_interpreter_facts(json.loads(sys.argv[1]), sys.argv[2] == 'torch')))\n"
)


@lru_cache(maxsize=32)
def _probe(
    python: str, packages: str, torch: bool, env: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """What _PROBE prints in ``python`` with ``env``: once per process for each (a sweep's
    jobs on one stack would each pay its interpreter's start, seconds where it imports torch)."""
    info: dict[str, str] = {}
    try:
        out = subprocess.run(
            [python, "-c", _PROBE, packages, "torch" if torch else "-"],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(env),
        )
        if out.returncode == 0:
            info.update(json.loads(out.stdout.strip().splitlines()[-1]))
        else:
            info["probe_error"] = (out.stderr.strip().splitlines() or ["failed"])[-1][:300]
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        info["probe_error"] = f"{python}: {exc}"[:300]
    return tuple(info.items())


def stack(server: ServerSettings[Any], engine: StackEngine) -> dict[str, str]:
    """The stack as its own interpreter sees it (the engine's packages among others), plus the
    engine version, CUDA toolkit, driver and hardware. Values that cannot be read are left
    out, not guessed."""
    variables = stack_env(server)
    env = {**os.environ, **variables}
    info: dict[str, str] = {}
    python = stack_python(server)
    # Importing torch takes seconds: only for servers that run on it.
    common = _COMMON_PACKAGES if engine.runs_on_torch else {}
    # A binary from stack.bin_dir is not the one the interpreter's package holds (an older
    # build beside it): its identity is the engine version's, never that package's.
    own = {} if server.stack.bin_dir and not engine.runs_in_stack_python else engine.stack_packages
    packages = {**common, **own}
    if python == sys.executable and not variables and not engine.runs_on_torch:
        # This interpreter with these variables: what it holds is what the server runs with
        # (a second start of it took most of a second to say so).
        info.update(_interpreter_facts(packages, torch=False))
    else:
        env_items = tuple(sorted(env.items()))
        info.update(_probe(python, json.dumps(packages), engine.runs_on_torch, env_items))
    version, source = engine.version(server)
    info["engine_version"] = version or "unknown"
    info["engine_version_source"] = source
    cuda_home = env.get("CUDA_HOME")
    nvcc = (
        os.path.join(cuda_home, "bin", "nvcc")
        if cuda_home
        else shutil.which("nvcc", path=env.get("PATH"))
    )
    if nvcc and os.path.exists(nvcc):
        toolkit = command_output([nvcc, "--version"])
        if toolkit is not None:
            info["cuda_toolkit"] = (toolkit.strip().splitlines() or [""])[-1]
    if shutil.which("nvidia-smi"):
        driver = command_output(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        )
        if driver and driver.strip():
            info["driver"] = driver.strip().splitlines()[0]
    info.update(hardware())
    info["host"] = platform.node()
    return {k: str(v) for k, v in info.items()}
