"""What every record of the result model shares: one serialiser, one non-finite encoding.

Records are pydantic dataclasses: positional construction and `dataclasses`
tools keep working, while validation, the JSON form and the JSON Schema come
from one place (pydantic) instead of hand-written `to_dict`/`from_dict` pairs.
JSON has no NaN or infinity; every float field that may hold one is typed
`Real` and travels as the strings "nan", "inf", "-inf".
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeVar

from pydantic import BeforeValidator, ConfigDict, PlainSerializer, TypeAdapter, WithJsonSchema

NON_FINITE = ("nan", "inf", "-inf")

# Records ignore keys they do not know (a newer writer may add some); the shipped
# schema still lists every key, and `schema_version` guards incompatible changes.
CONFIG = ConfigDict(extra="ignore", json_schema_serialization_defaults_required=True)


def encode_real(x: float | None) -> float | str | None:
    """A float as JSON carries it: non-finite values as strings."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _decode_real(x: Any) -> Any:
    if isinstance(x, str) and x.strip().lower() in NON_FINITE:
        return float(x)
    return x


Real = Annotated[
    float,
    BeforeValidator(_decode_real),
    PlainSerializer(encode_real, when_used="json"),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"enum": list(NON_FINITE)}]}),
]
"""A float that may be NaN or ±inf."""

T = TypeVar("T")


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def adapter(cls: type[T]) -> TypeAdapter[T]:
    """One TypeAdapter per record class (building one costs a schema compile)."""
    found = _ADAPTERS.get(cls)
    if found is None:
        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


class Record:
    """Mixin: `to_dict()` is the JSON form, `from_dict()` validates one back."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = adapter(type(self)).dump_python(self, mode="json")
        return out

    @classmethod
    def from_dict(cls: type[T], data: Any) -> T:
        return adapter(cls).validate_python(data)
