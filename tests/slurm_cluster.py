"""A real one-node Slurm cluster for the tests: munge, slurmctld and slurmd from Debian's
packages (scripts/install.sh installs them), configured in a temporary directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import psutil

from specexp.host.leases import free_port

PARTITION = "debug"


def _munge_works() -> bool:
    try:
        encoded = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        return (
            encoded.returncode == 0
            and subprocess.run(
                ["unmunge"], input=encoded.stdout, capture_output=True, timeout=10
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _config(root: Path) -> str:
    host = socket.gethostname().split(".")[0]
    memory_mb = psutil.virtual_memory().total // 2**20 // 2
    return "\n".join(
        [
            "ClusterName=specexp-test",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/slurmctld.log",
            f"SlurmdLogFile={root}/slurmd.log",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            # No cgroups in a container: track processes by parentage, bind nothing.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@contextlib.contextmanager
def one_node_cluster(root: Path) -> Iterator[dict[str, str]]:
    """Start the cluster; yield the environment that points Slurm's commands at it."""
    missing = [b for b in ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(b)]
    if missing:
        raise RuntimeError(
            f"Slurm is not installed ({', '.join(missing)} missing): run scripts/install.sh"
        )
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(_config(root))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if not _munge_works():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        subprocess.run(["munged", "--force"], check=True, capture_output=True, timeout=30)
    daemons = [
        subprocess.Popen(
            [daemon, "-D"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for daemon in ("slurmctld", "slurmd")
    ]
    try:
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True
            ).stdout.strip()
            if state == "idle":
                break
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                logs = "\n".join(
                    (root / f"{d}.log").read_text()[-1500:]
                    for d in ("slurmctld", "slurmd")
                    if (root / f"{d}.log").exists()
                )
                raise RuntimeError(
                    f"the test Slurm cluster did not come up (node state {state!r}):\n{logs}"
                )
            time.sleep(0.5)
        yield {"SLURM_CONF": str(conf)}
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
