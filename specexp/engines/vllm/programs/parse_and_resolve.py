"""Run by the vLLM stack's interpreter, never imported by specexp: vLLM's serve parser on
each flag list (its module moved in 0.33), then in "parse" mode one error (or null) per
list, in "resolve" mode the settings vLLM resolves: the request cap and, for n-grams,
SpeculativeConfig's own values.

argv: MODE ("parse" or "resolve") FLAG_LISTS (JSON)"""

import contextlib
import io
import json
import sys
from typing import Any

try:
    from vllm.entrypoints.common.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.config import SpeculativeConfig
from vllm.utils.argparse_utils import FlexibleArgumentParser

mode = sys.argv[1]
out: list[Any] = []
for flags in json.loads(sys.argv[2]):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = make_arg_parser(FlexibleArgumentParser()).parse_args(flags)
    except SystemExit:
        error = stderr.getvalue().strip().splitlines()[-1]
        if mode == "resolve":
            sys.exit(error)
        out.append(error)
        continue
    speculative = args.speculative_config or {}
    resolved = {"max_num_seqs": args.max_num_seqs}
    try:
        if speculative.get("rejection_sample_method") == "synthetic":
            # vLLM's own check and resolution of a pinned length into per-position rates
            # (the whole SpeculativeConfig would load the draft model).
            speculative = {
                **speculative,
                "synthetic_acceptance_rates": SpeculativeConfig._resolve_synthetic_acceptance_rates(
                    speculative.get("num_speculative_tokens", 1),
                    speculative.get("synthetic_acceptance_rates"),
                    speculative.get("synthetic_acceptance_length"),
                ),
            }
        if speculative.get("method") == "ngram":
            given = {k: v for k, v in speculative.items() if k != "synthetic_acceptance_rates"}
            config = SpeculativeConfig(**given)
            window = ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max")
            speculative = {
                **speculative,
                **{k: getattr(config, k) for k in [*given, *window]},
            }
            if config.rejection_sample_method == "synthetic":
                speculative["synthetic_acceptance_rates"] = config.synthetic_acceptance_rates
    except Exception as exc:
        if mode == "resolve":
            raise
        out.append(f"--speculative-config: {exc}")
        continue
    resolved.update({f"speculative_config.{k}": v for k, v in speculative.items()})
    out.append(None if mode == "parse" else resolved)
print(json.dumps(out))
