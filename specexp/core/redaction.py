"""What never leaves the machine in clear, wherever specexp writes or prints: credentials.

One rule - :func:`redact_text` for any text, :func:`redact_env` and :func:`redact_tree` for
variables and configs (names and values) on top of it - used by every writer: the console,
a run's and a sweep's files (environment.json, config.yaml, command.txt, multirun.yaml, the
server's log, the journals), and the MLflow store (every param and tag, descriptions among
them, at :func:`specexp.tracking.store.stored_values`; artifacts are those files).

Replaced by ``***``:

- the value of a variable, config key or query parameter whose name says it is a secret: a
  word of the name is or ends in PASS (PASSWORD, SSHPASS), PWD, SECRET, CREDENTIAL, COOKIE,
  WEBHOOK, or is PAT, AUTH, AUTHORIZATION, SIG, SIGNATURE, DSN; or its last word ends in
  TOKEN or KEY or is SESSION (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``X-Amz-Signature``);
- in any text, whatever its name: a URL's password (``scheme://user:***@``, any scheme:
  http, redis, postgres, mysql+driver...) or its user where it has no password (often a
  token: ``https://***@github.com``); such a name's value in ``NAME=value``, ``?name=value``,
  ``--name=value`` and ``--name value``; what follows ``Authorization:`` or ``Bearer``; the
  path of a webhook (hooks.slack.com, Discord's /api/webhooks/, any URL naming a webhook),
  whose address is the credential; tokens that say what they are by their prefix (GitHub's
  ghp_ and github_pat_, Hugging Face's hf_, Slack's xox*-, GitLab's glpat-, sk-, AWS's AKIA);
  a PEM private key.

Kept, because it identifies the stack and the run and is no credential: every other
variable's name and value (``PATH``, ``CUDA_VISIBLE_DEVICES``, ``NCCL_*``, ``VLLM_*``), names
that only look like secrets (``TOKENIZERS_PARALLELISM``, ``EOS_TOKEN_ID``, ``KEY_FILE``, the
shell's ``PWD`` and ``OLDPWD``, which are folders, MLflow's ``viewStateShareKey``, a saved
view's name), the name of every redacted variable (that it was set can matter), and the rest
of a redacted URL - scheme, user, host, port, path, its other query parameters - so that
which store, server or data set a run used stays readable.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

REDACTED = "***"

# Words of a name that say its value is a secret, wherever they stand (MYSQL_PWD, SSHPASS,
# GITHUB_PAT, SESSION_COOKIE, X-Amz-Signature) ...
_SECRET_WORD = re.compile(
    r"\w*PASS\w*|\w*PWD|\w*SECRETS?|\w*CREDENTIALS?|\w*COOKIES?|PAT|AUTH|AUTHORIZATION"
    r"|SIG|SIGNATURE|DSN|\w*WEBHOOKS?",
    re.IGNORECASE,
)
# ... and those that do only as its last word (HF_TOKEN, API_KEY, access_token, session=),
# which EOS_TOKEN_ID, KEY_FILE or SESSION_TYPE are not.
_SECRET_LAST_WORD = re.compile(r"\w*TOKEN|\w*KEY|SESSION|SESSIONID", re.IGNORECASE)
# The shell's working folders, and the UI's saved view in the store's links, named like secrets.
_NOT_SECRET = {"PWD", "OLDPWD", "VIEWSTATESHAREKEY"}
# Words of a name: split at anything not a letter or digit, and where camelCase turns.
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# scheme://user:password@ or scheme://token@ (a user alone in a URL is often a token); a
# password runs to the last @ before the host (it may hold an @ unescaped).
_USER_INFO = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/@\s:?#\"'<>]*)"
    r"(?P<password>:[^/\s?#\"'<>]*)?@"
)
# NAME=value, in a query string (?name=, &name=, ;name=), a shell line or a flag (--name=).
_ASSIGNMENT = re.compile(r"(?P<name>(?<![\w.-])-{0,2}[A-Za-z_][\w.-]*)=(?P<value>[^&;\s#\"'<>]+)")
# --name VALUE on a command line.
_FLAG = re.compile(r"(?P<flag>(?<![\w-])--?[A-Za-z][\w-]*)(?P<space>\s+)(?P<value>[^\s-]\S*)")
_AUTHORIZATION = re.compile(
    r"(?P<header>\b(?:Proxy-)?Authorization\s*[:=]\s*)[^\s\"',;]+(?:\s+[^\s\"',;]+)?",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<kind>\bBearer\s+)[\w.~+/=-]{8,}", re.IGNORECASE)
_URL = re.compile(r"(?P<address>https?://[^/\s\"'<>]+)(?P<rest>/[^\s\"'<>]*)?", re.IGNORECASE)
# Tokens that say what they are by their prefix: GitHub's, Hugging Face's, Slack's,
# GitLab's, OpenAI-style keys, AWS access key ids.
_KNOWN_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|hf_[A-Za-z0-9]{20,}"
    r"|xox[abposr]-[\w-]{10,}|glpat-[\w-]{20,}|sk-[\w-]{20,}|AKIA[0-9A-Z]{16})"
)
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL
)


def is_secret_name(name: str) -> bool:
    """Whether a variable, config key or query parameter named ``name`` holds a secret."""
    words = [word for word in _WORD_BREAK.split(name) if word]
    if not words or name.upper() in _NOT_SECRET:
        return False
    return bool(_SECRET_LAST_WORD.fullmatch(words[-1])) or any(
        _SECRET_WORD.fullmatch(word) for word in words
    )


def redact_text(text: str) -> str:
    """``text`` with every credential in it replaced (the module's docstring says which)."""

    def user_info(match: re.Match[str]) -> str:
        scheme, user, password = match.group("scheme", "user", "password")
        if password is not None:
            return f"{scheme}{user}:{REDACTED}@"
        return f"{scheme}{REDACTED}@"

    def assignment(match: re.Match[str]) -> str:
        name = match.group("name")
        return f"{name}={REDACTED}" if is_secret_name(name) else match.group(0)

    def webhook(match: re.Match[str]) -> str:
        address, rest = match.group("address", "rest")
        if rest and ("hooks.slack.com" in address.lower() or "webhook" in match.group(0).lower()):
            return f"{address}/{REDACTED}"
        return match.group(0)

    def flag(match: re.Match[str]) -> str:
        name = match.group("flag")
        return f"{name}{match.group('space')}{REDACTED}" if is_secret_name(name) else match.group(0)

    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _URL.sub(webhook, text)
    text = _USER_INFO.sub(user_info, text)
    text = _AUTHORIZATION.sub(lambda m: m.group("header") + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group("kind") + REDACTED, text)
    text = _KNOWN_TOKEN.sub(REDACTED, text)
    text = _FLAG.sub(flag, text)
    return _ASSIGNMENT.sub(assignment, text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Variables with the values of secret-looking names replaced, and the credentials in
    every other value."""
    return {k: REDACTED if is_secret_name(k) else redact_text(str(v)) for k, v in env.items()}


def redact_tree(tree: Any) -> Any:
    """Nested dicts and lists (a config, a record) with the value of every secret-looking
    key replaced, and the credentials in every other string."""
    if isinstance(tree, dict):
        return {
            key: REDACTED
            if isinstance(key, str) and is_secret_name(key) and _scalar(value)
            else redact_tree(value)
            for key, value in tree.items()
        }
    if isinstance(tree, list):
        return [redact_tree(value) for value in tree]
    return redact_text(tree) if isinstance(tree, str) else tree


def _scalar(value: Any) -> bool:
    """A value to hide under a secret's name: set, and not a container (whose own keys say)."""
    return value not in (None, "") and not isinstance(value, (dict, list, bool))
