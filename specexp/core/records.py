"""Records written as JSON: one serializer for nested dataclasses, and each record type's
format history.

A record type is a dataclass that subclasses :class:`Record` and names its :class:`History`:
every format version it was written in and what each added. It is written with its current
``format_version`` (a record nested in another carries its own) and read back from any
version whose later changes were additive - fields with a default, which an earlier record
lacks and reads with - or come with an upgrade from the version before. A version it never
had, a field it does not have or a value of the wrong type is refused, naming where.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Optional, Self, Union

FORMAT_KEY = "format_version"


class RecordError(ValueError):
    """A record that cannot be read: another format, a missing or unknown field, a bad value."""


@dataclass(frozen=True)
class Version:
    """One format version of a record type: what it added (``fields``, each with a default,
    so that an earlier record reads with them) and, for a change that is not additive (a
    rename, a new meaning), ``upgrade``: the previous version's record made this one's."""

    number: int
    added: str
    fields: tuple[str, ...] = ()
    upgrade: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None


@dataclass(frozen=True)
class History:
    """What a record is called (in messages) and its versions, oldest first."""

    record: str
    versions: tuple[Version, ...]

    def __post_init__(self) -> None:
        numbers = [v.number for v in self.versions]
        if not numbers or numbers != list(range(numbers[0], numbers[0] + len(numbers))):
            raise ValueError(f"{self.record}: versions must count up by one, not {numbers}")

    @property
    def current(self) -> int:
        return self.versions[-1].number

    def upgrade(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The record as the current version has it, its format key dropped; a version this
        history does not have is refused."""
        found = data.get(FORMAT_KEY)
        known = {v.number: k for k, v in enumerate(self.versions)}
        if found not in known:
            raise RecordError(
                f"a {self.record} record of format {found!r}: this specexp reads formats "
                f"{self.versions[0].number} to {self.current} (a newer specexp wrote it, or it "
                "is not such a record)"
            )
        record = {k: v for k, v in data.items() if k != FORMAT_KEY}
        for version in self.versions[known[found] + 1 :]:
            if version.upgrade is not None:
                record = version.upgrade(record)
        return record


class Record:
    """A dataclass written as JSON with its format version (``HISTORY``) and read back from
    every version its history can upgrade."""

    HISTORY: ClassVar[History]

    def to_json(self) -> dict[str, Any]:
        return unstructure(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return structure(cls, data)


def _derived(kind: type) -> tuple[str, ...]:
    """The properties a dataclass writes beside its fields for readers of the file (its
    ``DERIVED``), which are not read back."""
    return typing.cast(tuple[str, ...], getattr(kind, "DERIVED", ()))


def unstructure(value: Any) -> Any:
    """``value`` as JSON values: dataclasses as objects (with their ``DERIVED`` values, and
    a record with its format version first), enums as their values, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)] + list(_derived(type(value)))
        fields = {name: unstructure(getattr(value, name)) for name in names}
        if isinstance(value, Record):
            return {FORMAT_KEY: value.HISTORY.current, **fields}
        return fields
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {unstructure(k): unstructure(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [unstructure(v) for v in value]
    return value


_T = typing.TypeVar("_T")


def structure(kind: type[_T], data: Any) -> _T:
    """A ``kind`` from what :func:`unstructure` wrote (read from JSON); a value that is not
    one is refused with where it is and what was expected."""
    what = kind.HISTORY.record if issubclass(kind, Record) else kind.__name__
    return typing.cast(_T, _structure(kind, data, what))


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _structure(kind: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(kind)
    if kind is Any:
        return data
    if origin is Union or origin is types.UnionType:
        return _union(typing.get_args(kind), data, where)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass(kind, data, where)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(data)
        except ValueError:
            raise RecordError(f"{where}: {data!r} is not a {kind.__name__}") from None
    if kind in (dict, list):
        _expect(isinstance(data, kind), f"a {kind.__name__}", data, where)
        return data
    if origin in (list, tuple, collections.abc.Sequence):
        return _sequence(kind, origin, data, where)
    if origin in (dict, collections.abc.Mapping):
        key, value = typing.get_args(kind)
        _expect(isinstance(data, Mapping), "an object", data, where)
        return {
            _key(key, k, where): _structure(value, v, f"{where}[{k!r}]") for k, v in data.items()
        }
    return _scalar(kind, data, where)


def _key(kind: Any, key: Any, where: str) -> Any:
    """A mapping's key: JSON writes every key as a string, an integer's too."""
    if kind is int and isinstance(key, str):
        _expect(key.lstrip("-").isdigit(), "an integer key", key, where)
        return int(key)
    return _structure(kind, key, f"{where} key")


def _union(options: tuple[Any, ...], data: Any, where: str) -> Any:
    if data is None and type(None) in options:
        return None
    errors = []
    for option in (o for o in options if o is not type(None)):
        try:
            return _structure(option, data, where)
        except RecordError as error:
            errors.append(str(error))
    raise RecordError("; ".join(errors))


def _sequence(kind: Any, origin: Any, data: Any, where: str) -> Any:
    _expect(isinstance(data, (list, tuple)), "a list", data, where)
    args = typing.get_args(kind)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        _expect(len(data) == len(args), f"{len(args)} values", data, where)
        return tuple(
            _structure(a, v, f"{where}[{k}]")
            for k, (a, v) in enumerate(zip(args, data, strict=True))
        )
    items = [_structure(args[0], v, f"{where}[{k}]") for k, v in enumerate(data)]
    return tuple(items) if origin is tuple else items


def _scalar(kind: Any, data: Any, where: str) -> Any:
    if kind is float:
        _expect(
            isinstance(data, (int, float)) and not isinstance(data, bool), "a number", data, where
        )
        return float(data)
    if kind is int:
        whole = isinstance(data, float) and data.is_integer()
        _expect(
            isinstance(data, int) and not isinstance(data, bool) or whole, "an integer", data, where
        )
        return int(data)
    if kind in (str, bool):
        _expect(isinstance(data, kind), f"a {kind.__name__}", data, where)
        return data
    raise TypeError(f"{where}: the record serializer has no reader for {kind!r}")


def _dataclass(kind: type, data: Any, where: str) -> Any:
    _expect(isinstance(data, Mapping), "an object", data, where)
    history = kind.HISTORY if issubclass(kind, Record) else None
    record = history.upgrade(data) if history else dict(data)
    fields = {f.name: f for f in dataclasses.fields(kind) if f.init}
    unknown = set(record) - set(fields) - set(_derived(kind))
    if unknown:
        raise RecordError(f"{where}: no field {', '.join(sorted(unknown))} in a {kind.__name__}")
    hints = _hints(kind)
    values = {}
    for name, f in fields.items():
        if name in record:
            values[name] = _structure(hints[name], record[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{where}: lacks {name!r}, which a {kind.__name__} must have")
    try:
        return kind(**values)
    except (TypeError, ValueError) as exc:  # the type's own checks of its values
        raise RecordError(f"{where}: {exc}") from None


def _expect(holds: bool, expected: str, data: Any, where: str) -> None:
    if not holds:
        raise RecordError(f"{where}: expected {expected}, found {data!r:.80}")
