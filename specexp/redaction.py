"""What never leaves the machine in clear: values of secret-looking variables."""

from __future__ import annotations

import re
from typing import Mapping

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "***"


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment with values of secret-looking names replaced, for logging."""
    return {k: (REDACTED if _SECRET_NAME.search(k) else v) for k, v in env.items()}
