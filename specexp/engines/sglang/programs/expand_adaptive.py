"""Run by the SGLang stack's interpreter (or specexp's with the release's sources), never
imported by specexp: each adaptive-speculation config through SGLang's own loader and
router (speculative/adaptive_spec_params.py AdaptiveSpeculativeParams): the steps it runs at
every batch size up to the cap, the batch padded to the captured CUDA-graph sizes first as
the worker does, and the start-up check that --speculative-num-steps is a candidate
(arg_groups/speculative_hook.py _init_adaptive_speculative_params). Prints one entry per
config: the steps of batch sizes 1..max_batch, or the error.

argv: ENTRIES (JSON: [{"config": ..., "num_steps": N, "cuda_graph_bs": [...], "max_batch": N}])"""

import json
import logging
import sys
import tempfile
from typing import Any

from sglang.srt.speculative.adaptive_spec_params import (
    AdaptiveSpeculativeParams,
    resolve_candidate_steps_from_config,
)

logging.disable(logging.CRITICAL)
out: list[Any] = []
for entry in json.loads(sys.argv[1]):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as config:
        json.dump(entry["config"], config)
        config.flush()
        try:
            candidates = resolve_candidate_steps_from_config(config.name)
            if entry["num_steps"] not in candidates:
                raise ValueError(
                    f"--speculative-num-steps={entry['num_steps']} is not in the adaptive "
                    f"config candidate_steps {candidates}"
                )
            params = AdaptiveSpeculativeParams(entry["num_steps"], config.name)
        except ValueError as exc:
            out.append({"error": str(exc)})
            continue
    params.set_cuda_graph_bs(entry["cuda_graph_bs"])
    steps = [params.get_steps_for_batch(b) for b in range(1, entry["max_batch"] + 1)]
    out.append({"draft_tokens": steps})
print(json.dumps(out))
