"""Run by the vLLM stack's interpreter, never imported by specexp: each flag list through
vLLM's serve parser, then its --speculative-config's batch schedule through vLLM's own check
and expansion into the K of every batch size up to the request cap, as its scheduler builds
it (v1/core/sched/scheduler.py: build_dynamic_sd_schedule_lookup). Prints one entry per
list: the K of batch sizes 1..max_num_seqs, or the error.

argv: FLAG_LISTS (JSON)"""

import contextlib
import io
import json
import sys
from typing import Any

try:
    from vllm.entrypoints.common.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

out: list[Any] = []
for flags in json.loads(sys.argv[1]):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = make_arg_parser(FlexibleArgumentParser()).parse_args(flags)
        speculative = args.speculative_config or {}
        lookup = build_dynamic_sd_schedule_lookup(
            speculative.get("num_speculative_tokens_per_batch_size"),
            vllm_max_batch_size=args.max_num_seqs,
            vllm_num_speculative_tokens=speculative.get("num_speculative_tokens", 0),
        )
        out.append({"draft_tokens": lookup[1:]})
    except SystemExit:
        out.append({"error": stderr.getvalue().strip().splitlines()[-1]})
    except ValueError as exc:
        out.append({"error": str(exc)})
print(json.dumps(out))
