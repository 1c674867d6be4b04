"""The SGLang releases specexp composes flags for: where their spellings and behaviours
change, and the features a configuration needs, each with the first release that has it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from packaging.version import Version

from specexp.core.schemas.engine import ServerSettings
from specexp.core.schemas.speculative import SpeculativeMethod

# Releases whose flags specexp composes (checked by their own parsers in the tests); a
# stack without a known version gets the newest's spellings, and says so.
OLDEST_KNOWN, NEWEST_KNOWN = Version("0.5.9"), Version("0.5.23")
# Last release whose n-gram speculation matches a window of n-gram sizes
# (--speculative-ngram-{min,max}-match-window-size, 0.5.9 server_args.py); from 0.5.10 a
# suffix trie (--speculative-ngram-max-trie-depth) replaces it, with no n-gram size to set
# (checked in the 0.5.10, 0.5.12, 0.5.14, 0.5.18, 0.5.21 and 0.5.23 wheels).
NGRAM_WINDOW_UNTIL = Version("0.5.9")
# First release that spells FlashInfer allreduce fusion as a backend choice (0.5.13 does not).
FUSION_BACKEND_SINCE = Version("0.5.14")
# First release that spells the decode CUDA-graph batch sizes --cuda-graph-bs-decode
# (arg_groups/fields/exec_.py); --cuda-graph-bs until 0.5.13 (checked in the 0.5.10 to
# 0.5.23 wheels).
CUDA_GRAPH_BS_DECODE_SINCE = Version("0.5.14")


KIMI_K25 = "KimiK25ForConditionalGeneration"
# For these GPUs (SM90, SM100) SGLang turns FlashInfer allreduce fusion on by itself for
# Kimi-K2.5 and a few other MoE models (0.5.9 server_args.py
# _handle_model_specific_adjustments; 0.5.23 arg_groups/model_hook.py) ...
FUSION_AUTO_ON_CAPABILITIES = ("9.0", "10.0")
# ... and from 0.5.10 --enforce-disable-flashinfer-allreduce-fusion keeps it off (checked
# in the 0.5.10 to 0.5.23 wheels; 0.5.9 has no off switch).
ENFORCE_NO_FUSION_SINCE = Version("0.5.10")


@dataclass(frozen=True)
class Feature:
    """An SGLang capability a configuration needs, the first release that has it, and where
    that is read in SGLang's code."""

    name: str
    since: Version
    source: str
    needed: Callable[[ServerSettings], bool]


FEATURES = (
    Feature(
        "kimi_k25_eagle3",
        Version("0.5.10"),
        "the EAGLE-3 worker calls model.get_embed_and_head() (speculative/eagle_worker.py), "
        "which models/kimi_k25.py defines from 0.5.10 (not in 0.5.9)",
        lambda s: (
            s.speculative.method == SpeculativeMethod.eagle3 and s.model.architecture == KIMI_K25
        ),
    ),
)
