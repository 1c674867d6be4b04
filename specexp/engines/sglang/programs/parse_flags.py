"""Run by the SGLang stack's interpreter (never imported by specexp): parse each flag list
of argv[1] (JSON) with SGLang's own parser; print one error (or null) per list."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

from sglang.srt.server_args import ServerArgs

errors: list[str | None] = []
for flags in json.loads(sys.argv[1]):
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args(flags)
        errors.append(None)
    except SystemExit:
        errors.append(stderr.getvalue().strip().splitlines()[-1])
print(json.dumps(errors))
