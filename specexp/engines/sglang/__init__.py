"""SGLang (``python -m sglang.launch_server``), the reference story's engine, TP 8.

Flag spellings follow the SGLang version the stack holds: 0.5.9 and current releases
differ (docs/reference/engines.md). Only the spellings that changed are versioned
(``releases.py``).
"""

from specexp.engines.sglang.config import SGLangConfig
from specexp.engines.sglang.engine import SGLangEngine

__all__ = ["SGLangConfig", "SGLangEngine"]
