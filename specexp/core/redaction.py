"""What never leaves the machine in clear: values of secret-looking variables, and the
user-info (user:password@, token@) of any URL, wherever specexp writes or prints them."""

from __future__ import annotations

import re
from typing import Any, Mapping

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# scheme://user:password@ or scheme://token@ (a user alone in a URL is often a token).
_USER_INFO = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/@\s:]+)(?::[^/@\s]*)?@"
)
REDACTED = "***"


def redact_text(text: str) -> str:
    """``text`` with the password (or, without one, the user) of every URL in it replaced."""

    def hide(match: re.Match[str]) -> str:
        has_password = ":" in match.group(0)[len(match.group("scheme")) :]
        user = match.group("user") if has_password else REDACTED
        return f"{match.group('scheme')}{user}{':' + REDACTED if has_password else ''}@"

    return _USER_INFO.sub(hide, text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment with values of secret-looking names replaced, and credentials in URLs."""
    return {k: (REDACTED if _SECRET_NAME.search(k) else redact_text(v)) for k, v in env.items()}


def redact_tree(tree: Any) -> Any:
    """Every string in nested dicts and lists, with credentials in URLs replaced."""
    if isinstance(tree, dict):
        return {key: redact_tree(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [redact_tree(value) for value in tree]
    return redact_text(tree) if isinstance(tree, str) else tree
