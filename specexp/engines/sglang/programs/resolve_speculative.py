"""Run by the SGLang stack's interpreter, never imported by specexp: SGLang's own speculative
resolution (0.5.9's ServerArgs._handle_speculative_decoding, 0.5.23's
arg_groups.speculative_hook) on each flag list, the model's config answered from the
declared architecture, the device from the declared GPUs, the page size as SGLang's default
(1) unless set, and the draft's algorithm taken as given. Arguments: the flag lists (JSON),
the architecture, the device. Prints the resolved settings, one object per list."""

import argparse
import dataclasses
import json
import logging
import sys
import types

from sglang.srt.server_args import ServerArgs

logging.disable(logging.CRITICAL)
model = types.SimpleNamespace(hf_config=types.SimpleNamespace(architectures=[sys.argv[2]]))
fields = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "max_running_requests",
)
try:
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.arg_groups.overrides import resolving_view
except ImportError:
    speculative_hook = None
resolved = []
for flags in json.loads(sys.argv[1]):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(flags)
    args.device = args.device or sys.argv[3]
    args.page_size = args.page_size or 1  # resolved by earlier hooks: 1 unless set
    if speculative_hook is not None:
        server_args = ServerArgs.from_cli_args(args)
        speculative_hook.model_config_of = lambda *a, **k: model
        speculative_hook._resolve_speculative_algorithm_alias = lambda algorithm, *a, **k: algorithm
        speculative_hook.handle_speculative_decoding(server_args)
        view = resolving_view(server_args)
    else:
        view = object.__new__(ServerArgs)
        for f in dataclasses.fields(ServerArgs):
            default = (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            )
            setattr(view, f.name, getattr(args, f.name, default))
        view.get_model_config = lambda: model
        ServerArgs._handle_speculative_decoding(view)
    resolved.append({f: getattr(view, f) for f in fields})
print(json.dumps(resolved))
