"""What every spec model of the CRDs shares: strict camelCase models, and checks whose messages say what is
allowed (pydantic reports them with the field's path)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from memsync.crd.core import schema_problems


class SpecModel(BaseModel):
    # strict: the API server would refuse "15" for an integer or 1 for a string; so do we.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )


def matched(value: str, pattern: str, max_length: int, requirement: str) -> str:
    """``value`` when it is at most ``max_length`` characters and matches ``pattern`` whole; else a
    ValueError saying what is allowed (pydantic reports it with the field's path)."""
    if len(value) > max_length or re.fullmatch(pattern, value) is None:
        raise ValueError(requirement)
    return value


def checked(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` when it fits ``schema`` (structurally, strict about unknown fields); else a ValueError whose
    lines name each offending path relative to the field (see :func:`describe_validation_error`)."""
    problems = schema_problems(schema, value, "")
    if problems:
        raise ValueError("\n".join(problems))
    return value
