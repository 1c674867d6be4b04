"""specexp: measure LLM serving (speculative decoding first) - run, sweep, compare, track.

    specexp run model=tiny-pair-small speculative=draft     # one run (Hydra overrides)
    specexp sweep speculative=none,draft                    # a sweep: one job per value
    specexp compare --baseline speculative=none             # verdicts between runs
    specexp history                                         # changes over time
    specexp doctor engine=sglang stack=cu130                # will these jobs run as asked?
    specexp upload outputs/2026-12-03/08-00-00              # runs measured offline
    specexp models list                                     # the models and their files
    specexp ui                                              # the MLflow UI on the store

``specexp run ARGS`` is ``python -m specexp ARGS`` and ``specexp sweep ARGS`` is
``python -m specexp -m ARGS``: one command, one exit status for each outcome (docs/cli.md):

    0    done (a sweep's jobs compared, its report in the store)
    1    a run, a sweep's job, a doctor check or a journal's upload failed
    2    a usage error (the nearest valid spelling is named) or a config refused
    3    ``history --fail-on-regression`` found a regression
    69   the tracking store does not answer (a sweep's start, compare, history)
    70   an error specexp did not expect
    74   specexp's own files could not be written (a full disk)
    75   measured, but in a journal, not the store: ``specexp upload DIR`` later
    130  interrupted (128+N for signal N: 143 SIGTERM)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Callable, Optional

from specexp import (
    api,
    compare_command,
    doctor_command,
    history_command,
    models,
    options,
    upload_command,
)
from specexp.host import failure, interrupt
from specexp.host.leases import free_port
from specexp.options import USAGE_EXIT, UsageError
from specexp.output.terminal.loggers import VERBOSE, quiet_libraries
from specexp.output.terminal.screen import console, interrupted, print_stopped
from specexp.tracking.address import uri_in_force
from specexp.tracking.store import TrackingStore


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors name the nearest valid spelling (its own do for
    subcommands and choices; an unknown option gets it here)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments:"):
            given = message.split(":", 1)[1].split()[0]
            message = options.unknown(f"option {given!r}", given, _flags(self))
        super().error(message)


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's options and its subcommands' (argparse reports a subcommand's unknown
    option from the top parser)."""
    flags: list[str] = []
    for action in parser._actions:
        flags += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            flags += [f for sub in action.choices.values() for f in _flags(sub)]
    return flags


def _overrides(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        metavar="OVERRIDE",
        help=f"Hydra overrides of conf/config.yaml, e.g. model=tiny-pair-small {what}",
    )
    _config_options(parser)


# Hydra's options for configs, as ``python -m specexp`` takes them: --config-dir, and those
# that replace specexp's own config, passed on to be refused there with the same line.
_HYDRA_CONFIG_OPTIONS = ("config_dir", "config_path", "config_name")


def _config_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Hydra's own option for a user's configs, as ``python -m specexp`` takes it."""
    parser.add_argument(
        "-cd",
        "--config-dir",
        metavar="DIR",
        help="a folder of your own config groups (DIR/model/NAME.yaml: model=NAME), "
        "searched after specexp's",
    )
    parser.add_argument("-cp", "--config-path", help=argparse.SUPPRESS)
    parser.add_argument("-cn", "--config-name", help=argparse.SUPPRESS)
    return parser


def _hydra_args(args: argparse.Namespace) -> list[str]:
    """``python -m specexp``'s arguments: the command's Hydra config options, given before
    its overrides or among them (where argparse leaves them to the overrides), then the
    rest."""
    among = _config_options(argparse.ArgumentParser(add_help=False, allow_abbrev=False))
    chosen, overrides = among.parse_known_args(args.overrides, argparse.Namespace(**vars(args)))
    given = {name: getattr(chosen, name) for name in _HYDRA_CONFIG_OPTIONS}
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in given.items() if value]
    return flags + overrides


def version() -> str:
    """The installed version, and where it is imported from (a checkout, or a wheel's copy)."""
    try:
        version = importlib.metadata.version("specexp")
    except importlib.metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        version = "(not installed)"
    python = ".".join(map(str, sys.version_info[:2]))
    return f"specexp {version} from {Path(__file__).parent} (python {python})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specexp",
        description=__doc__.split("\n\n")[0],
        epilog="Each subcommand has its own --help. The Python API (import specexp) does "
        "the same: specexp.run_job, run_sweep, compare_runs, load.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show third-party libraries' INFO lines (MLflow's, Alembic's)",
    )
    parser.add_argument("--version", action="version", version=version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=summary)

    _overrides(
        command("run", "one run: launch a server, warm up, measure, test, track"),
        "speculative=draft",
    )
    _overrides(
        command("sweep", "a sweep (Hydra multirun): a job per combination, compared"),
        "speculative=none,draft (or +sweep=NAME)",
    )
    compare_command.add_arguments(command("compare", "verdicts between finished runs in MLflow"))
    history_command.add_arguments(
        command("history", "what changed in a configuration's tok/s over time")
    )
    _overrides(
        command("doctor", "will these jobs run as asked? checked before any model is loaded"),
        "engine=sglang",
    )
    upload_command.add_arguments(
        command("upload", "log runs measured while MLflow was unreachable")
    )
    models.add_arguments(
        command("models", "the packaged (trained) and generated models: list, prepare, verify")
    )
    ui = command("ui", "the MLflow UI on the store the runs used, on a free port")
    options.tracking_uri(ui)
    ui.add_argument("--port", type=int, default=0, help="the UI's port (default: a free one)")
    return parser


def _run(args: argparse.Namespace) -> int:
    return api.run_command(_hydra_args(args))  # python -m specexp ARGS, exit status and all


def _sweep(args: argparse.Namespace) -> int:
    return api.run_command(["-m", *_hydra_args(args)])


def _doctor(args: argparse.Namespace) -> int:
    api.check_overrides(_hydra_args(args))
    return doctor_command.main(_hydra_args(args))


def _ui(args: argparse.Namespace) -> int:
    """``mlflow ui`` on the store in force, on a free port; its address printed once it
    answers. Runs until interrupted."""
    uri, artifacts = uri_in_force(args.tracking_uri)
    if uri.startswith(("http://", "https://")):
        console.print(f"the store is a tracking server: its UI is at {uri}")
        return 0
    port = args.port or free_port()
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri]
    command += ["--default-artifact-root", artifacts] if artifacts else []
    # One worker for one person's browser: MLflow's default four each import it (seconds of
    # CPU apiece on a small machine) before the first page.
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    # No job runner: MLflow 3 starts huey consumers for it, which the UI does not need.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    verbose = bool(os.environ.get(VERBOSE))
    # Its own lines (uvicorn's, MLflow's) only with -v; kept to say why if it stops.
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=None if verbose else log,
            stderr=None if verbose else subprocess.STDOUT,
        )
        address = f"http://127.0.0.1:{port}/"
        try:
            while process.poll() is None:
                try:
                    urllib.request.urlopen(address + "health", timeout=1)
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                log.seek(0)
                console.print(f"[red]mlflow ui stopped:[/] {log.read()[-2000:]}")
                return process.returncode or 1
            console.print(f"MLflow UI on {uri}: [bold]{address}[/] (Ctrl-C stops it)")
            return process.wait()
        except KeyboardInterrupt:
            process.terminate()
            process.wait(timeout=30)
            return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run,
    "sweep": _sweep,
    "compare": compare_command.run,
    "history": history_command.run,
    "doctor": _doctor,
    "upload": upload_command.run,
    "models": models.run,
    "ui": _ui,
}


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        os.environ[VERBOSE] = "1"
    quiet_libraries()
    interrupt.install()
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print_stopped("usage error", str(exc))
        return USAGE_EXIT
    except Exception as exc:
        if not (failure.is_store_down(exc) or _store_not_opened(exc)):
            raise
        # A store read (compare, history) or written (upload) that does not answer.
        kept = "; the journals not uploaded are kept: upload them later" * (
            args.command == "upload"
        )
        print_stopped("MLflow store unreachable", failure.one_line(exc) + kept)
        return failure.NOT_IN_STORE if args.command == "upload" else failure.STORE_DOWN
    except KeyboardInterrupt:
        return interrupted(interrupt.received() or signal.SIGINT)


def _store_not_opened(exc: Exception) -> bool:
    """Whether ``exc`` stopped a store's opening in this process: a SQLite store's folder
    that cannot be made or written (a read-only disk, a file in its place) is a store down
    for the command, as a tracking server that does not answer is."""
    return isinstance(exc, OSError) and any(
        frame.f_code is TrackingStore.__init__.__code__
        for frame, _ in traceback.walk_tb(exc.__traceback__)
    )


def alias(command: str) -> int:
    """``python -m specexp.<command> ARGS`` (compare, history, upload, doctor): ``specexp
    COMMAND ARGS``, through :func:`main` - one code path, one exit status for each outcome."""
    return main([command, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
