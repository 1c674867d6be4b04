"""Issue 60: no secret written anywhere. A real run and a 2-job sweep through the `specexp`
command, with credentials in the tracking URI and in the environment in the shapes a shared
node or a CI job holds them: none reaches the console, a file under the working folder, or
the store (params, tags, descriptions, artifacts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import TINY, mlflow_process, run_cli

# Each value holds a marker that nothing else would write.
SECRET_ENV = {
    "MYSQL_PWD": "mysqlpwd-7Hq2",
    "SSHPASS": "sshpass-7Hq2",
    "GITHUB_PAT": "github_pat_11AAAAAAA0patsecret7Hq2",
    "AWS_SECRET_ACCESS_KEY": "awssecret-7Hq2/abcDEF",
    "HF_TOKEN": "hf_tokensecret7Hq2abcdefghijklmnopq",
    "SESSION_COOKIE": "sessioncookie-7Hq2",
    "CACHE_URL": "redis://:redispw-7Hq2@cache.internal:6379/0",
    "DATABASE_URL": "postgres://alice:postgrespw-7Hq2@db.internal:5432/runs",
    "WAREHOUSE": "mysql+pymysql://root:mysqlurlpw-7Hq2@db.internal/warehouse",
    "NOTIFY": "https://hooks.slack.com/services/T0000/B0000/slackhook7Hq2",
    "ALERTS": "https://discord.com/api/webhooks/123456789/discordhook7Hq2",
    "PROMPTS_SOURCE": (
        "https://bucket.s3.amazonaws.com/prompts.json?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAEXAMPLE7Hq2%2F20261206&X-Amz-Signature=s3signature7Hq2"
    ),
    "BLOB": "https://acct.blob.core.windows.net/c/f.json?sv=2022-11-02&sig=azuresig7Hq2",
    "FEED": "https://feeds.example.com/x?token=querytoken7Hq2",
    "EXTRA_HEADER": "Authorization: Bearer bearertoken7Hq2.abc",
    "GIT_REMOTE": "https://ghp_usertoken7Hq2abcdefghijklmnopqrst@github.com/org/repo.git",
}
TRACKING_PASSWORD = "trackingpw-7Hq2"
SECRETS = [
    TRACKING_PASSWORD,
    "mysqlpwd",
    "sshpass-",
    "patsecret",
    "awssecret",
    "tokensecret",
    "sessioncookie",
    "redispw",
    "postgrespw",
    "mysqlurlpw",
    "slackhook",
    "discordhook",
    "AKIAEXAMPLE",
    "s3signature",
    "azuresig",
    "querytoken",
    "bearertoken",
    "usertoken",
]


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def stored(client: MlflowClient, downloads: Path) -> dict[str, str]:
    """Every run of the store as text: its params, tags (descriptions among them) and each
    artifact, downloaded."""
    texts = {}
    for experiment in client.search_experiments():
        texts[f"experiment {experiment.name}"] = json.dumps(experiment.tags)
        for run in client.search_runs([experiment.experiment_id]):
            run_id = run.info.run_id
            texts[run_id] = json.dumps([run.data.params, run.data.tags, run.info.run_name])
            folder = Path(client.download_artifacts(run_id, "", str(downloads / run_id)))
            for path in folder.rglob("*"):
                if path.is_file():
                    texts[f"{run_id}/{path.relative_to(folder)}"] = path.read_text(errors="replace")
    return texts


@pytest.mark.load_tolerant
def test_no_secret_reaches_the_console_a_file_or_the_store(tmp_path, tmp_path_factory):
    (tmp_path / "tmp").mkdir()
    with mlflow_process("server", cwd=tmp_path) as url:
        uri = url.replace("http://", f"http://alice:{TRACKING_PASSWORD}@")
        env = {**SECRET_ENV, "MLFLOW_TRACKING_URI": uri, "TMPDIR": str(tmp_path / "tmp")}
        run = run_cli("run", *TINY, cwd=tmp_path, env=env, module="specexp.cli")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        # The sweep is told its store on its command line, where Hydra keeps overrides.
        sweep = run_cli(
            "sweep",
            *TINY,
            "replicate=1,2",
            f"tracking.uri={uri}",
            cwd=tmp_path,
            env={**env, "MLFLOW_TRACKING_URI": ""},
            module="specexp.cli",
        )
        assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
        client = MlflowClient(url)
        texts = stored(client, tmp_path_factory.mktemp("artifacts"))
    # Three job runs and a sweep's parent were stored, with their files.
    assert sum(1 for key in texts if "/" not in key and " " not in key) == 4
    assert any(key.endswith("/environment.json") for key in texts)
    console = {"run": run.stdout + run.stderr, "sweep": sweep.stdout + sweep.stderr}
    assert "alice:***@127.0.0.1" in console["run"]  # the store is named, its password not
    # The files are read whole, the store's database and artifacts (under tmp_path) too.
    files = {
        str(path): path.read_bytes().decode(errors="replace")
        for path in tmp_path.rglob("*")
        if path.is_file()
    }
    found = {
        where: leaks
        for where, text in {**console, **files, **texts}.items()
        if (leaks := leaked(text))
    }
    assert not found, json.dumps(found, indent=1)
    # What identifies the stack and the store is kept.
    (environment,) = tmp_path.glob("outputs/*/*/environment.json")
    inherited = json.loads(environment.read_text())["inherited"]
    assert inherited["PATH"] and inherited["CACHE_URL"] == "redis://:***@cache.internal:6379/0"
    assert inherited["MLFLOW_TRACKING_URI"] == url.replace("http://", "http://alice:***@")
    (multirun,) = tmp_path.glob("multirun/*/*/multirun.yaml")
    assert f"tracking.uri={inherited['MLFLOW_TRACKING_URI']}" in multirun.read_text()
