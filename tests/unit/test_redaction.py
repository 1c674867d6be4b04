"""The one redaction rule (specexp.core.redaction) over the shapes credentials come in, and
over what must stay readable: the stack's variables and the rest of a redacted URL."""

from __future__ import annotations

import logging

import pytest

from specexp.core.redaction import REDACTED, is_secret_name, redact_env, redact_text, redact_tree
from specexp.host import failure

# (variable, value, what of it is the secret, what is kept of it)
SHAPES = [
    ("MYSQL_PWD", "hunter2", "hunter2", ""),
    ("SSHPASS", "hunter2", "hunter2", ""),
    ("PGPASSWORD", "hunter2", "hunter2", ""),
    ("GITHUB_PAT", "github_pat_11ABCDEFG", "github_pat_11ABCDEFG", ""),
    ("HF_TOKEN", "hf_abc", "hf_abc", ""),
    ("AWS_SECRET_ACCESS_KEY", "wJalr/K7MDENG", "wJalr/K7MDENG", ""),
    ("OPENAI_API_KEY", "sk-abc", "sk-abc", ""),
    ("apiKey", "abc123", "abc123", ""),
    ("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json", "/keys/sa.json", ""),
    ("SESSION_COOKIE", "c00kie", "c00kie", ""),
    ("BASIC_AUTH", "alice:pw", "alice:pw", ""),
    ("SENTRY_DSN", "https://k3y@o1.ingest.sentry.io/1", "k3y", ""),
    ("CACHE", "redis://:redispw@cache:6379/0", "redispw", "redis://:***@cache:6379/0"),
    ("DB", "postgres://alice:pgpw@db:5432/x", "pgpw", "postgres://alice:***@db:5432/x"),
    ("DB", "mysql+pymysql://root:p@ss@db/x", "p@ss", "mysql+pymysql://root:***@db/x"),
    ("STORE", "http://alice:SECRET@127.0.0.1:5000", "SECRET", "http://alice:***@127.0.0.1:5000"),
    ("REMOTE", "https://ghp_tok@github.com/o/r.git", "ghp_tok", "https://***@github.com/o/r.git"),
    ("NOTIFY", "https://hooks.slack.com/services/T0/B0/slack", "T0/B0/slack", "hooks.slack.com"),
    ("ALERTS", "https://discord.com/api/webhooks/1/discord", "1/discord", "https://discord.com"),
    ("TEAMS", "https://x.webhook.office.com/webhookb2/abc", "abc", "x.webhook.office.com"),
    (
        "DATA",
        "https://b.s3.amazonaws.com/p.json?X-Amz-Algorithm=A&X-Amz-Credential=AK%2F1&X-Amz-Signature=s3sig",
        "s3sig",
        "https://b.s3.amazonaws.com/p.json?X-Amz-Algorithm=A&X-Amz-Credential=***&X-Amz-Signature=***",
    ),
    ("BLOB", "https://a.blob.core.windows.net/c/f?sv=2022&sig=azsig", "azsig", "sv=2022&sig=***"),
    ("FEED", "https://x.org/feed?token=qtok&page=2", "qtok", "https://x.org/feed?token=***&page=2"),
    ("HEADER", "Authorization: Bearer eyJhbGciOi.x.y", "eyJhbGciOi", "Authorization: ***"),
    ("CURL_ARGS", "-H 'Bearer eyJhbGciOiJIUzI1'", "eyJhbGciOiJIUzI1", "Bearer ***"),
    ("NOTE", "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ghp_aaaaaaaa", ""),
    ("NOTE", "xoxb-123456789012-abcdef", "xoxb-123456789012", ""),
    ("ID", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", ""),
    ("ARGS", "--api-key s3cr3tkey --port 8000", "s3cr3tkey", "--port 8000"),
    ("ARGS", "--token=s3cr3ttok", "s3cr3ttok", "--token=***"),
    ("KEYFILE", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "MIIE", ""),
]


@pytest.mark.parametrize(("name", "value", "secret", "kept"), SHAPES)
def test_every_shape_of_credential_is_redacted_and_the_rest_kept(name, value, secret, kept):
    (redacted,) = redact_env({name: value}).values()
    assert secret not in redacted and REDACTED in redacted
    assert kept in redacted


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PATH", "/usr/local/bin:/usr/bin"),
        ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
        ("PWD", "/work/main"),
        ("OLDPWD", "/work"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("NCCL_P2P_LEVEL", "NVL"),
        ("VLLM_ATTENTION_BACKEND", "FLASHINFER"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("HF_HOME", "/data/hf"),
        ("EOS_TOKEN_ID", "2"),
        ("KEYBOARD_LAYOUT", "us"),
        ("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        ("HTTPS_PROXY", "http://proxy.internal:3128"),
        ("PIP_INDEX_URL", "https://pypi.org/simple?format=json"),
    ],
)
def test_what_identifies_the_stack_is_kept(name, value):
    assert redact_env({name: value}) == {name: value}


def test_secret_names_are_words_not_substrings():
    assert [is_secret_name(n) for n in ("X-Amz-Signature", "sig", "access_token", "authToken")] == [
        True
    ] * 4
    assert [is_secret_name(n) for n in ("max_tokens", "num_draft_tokens", "key_file", "path")] == [
        False
    ] * 4


def test_text_keeps_its_shape_around_a_redacted_url():
    # A URL inside JSON text ends at its quote: the next field's @ is not its host.
    assert redact_text('{"a":"redis://:pw@h:1","b":"x@y"}') == '{"a":"redis://:***@h:1","b":"x@y"}'
    assert redact_text("http://host:80/x?email=a@b.org") == "http://host:80/x?email=a@b.org"
    assert redact_text("MYSQL_PWD=pw ls; n_tokens=5") == "MYSQL_PWD=*** ls; n_tokens=5"
    # A run's description links to a saved view of the UI by its name.
    link = "#/experiments/1/runs?workflowType=machine_learning&viewStateShareKey=specexp-benchmark"
    assert redact_text(link) == link


def test_a_tree_hides_values_under_secret_keys_and_credentials_in_any_string():
    tree = {
        "env": {"HF_TOKEN": "hf_x", "HOME": "/root"},
        "tracking": {"uri": "http://u:pw@h:1", "password": 1234},
        "runs": [{"api_key": "k"}, "Bearer abcdefghij"],
        "workload": {"max_tokens": 48, "draft_key": None},
    }
    assert redact_tree(tree) == {
        "env": {"HF_TOKEN": REDACTED, "HOME": "/root"},
        "tracking": {"uri": "http://u:***@h:1", "password": REDACTED},
        "runs": [{"api_key": REDACTED}, "Bearer ***"],
        "workload": {"max_tokens": 48, "draft_key": None},
    }


def test_a_traceback_in_the_log_file_names_the_store_without_its_password(tmp_path):
    """MLflow's error for a store that is down names its URL, password and all."""
    log = tmp_path / "specexp.log"
    handler = logging.FileHandler(log)
    logging.getLogger().addHandler(handler)
    try:
        try:
            raise RuntimeError("API request to http://alice:pw-7Hq2@127.0.0.1:9/api failed")
        except RuntimeError as exc:
            failure.log_traceback(exc)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    written = log.read_text()
    assert "Traceback" in written and "alice:***@127.0.0.1:9" in written
    assert "pw-7Hq2" not in written
