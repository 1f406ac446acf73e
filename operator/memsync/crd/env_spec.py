"""The extra environment of the memsync containers (``spec.template.memsync.env``): a proxy, a CA bundle..."""

from __future__ import annotations

from typing import Any, Final

from pydantic import field_validator

from memsync.contracts.env import RESERVED_PREFIXES, is_reserved
from memsync.crd import core
from memsync.crd.spec_base import SpecModel, checked, matched

#: An environment variable name, as Kubernetes accepts it.
ENV_NAME_PATTERN: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
ENV_NAME_MAX: Final = 256
MEMSYNC_ENV_MAX: Final = 32
#: The sources an extra memsync variable may take its value from (never the Pod's fields).
ENV_VALUE_SOURCES: Final = ("secretKeyRef", "configMapKeyRef")


class EnvVarSpec(SpecModel):
    """One extra environment variable of the memsync containers (a proxy, a CA bundle path...)."""

    name: str
    value: str | None = None
    value_from: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        matched(
            value,
            ENV_NAME_PATTERN,
            ENV_NAME_MAX,
            "must be an environment variable name (letters, digits, '_', '-' or '.', not starting with a "
            f"digit), at most {ENV_NAME_MAX} characters",
        )
        if is_reserved(value):
            raise ValueError(
                f"{value} is memsync's own variable (names starting with {' or '.join(RESERVED_PREFIXES)} "
                "are set by the operator and cannot be overridden)"
            )
        return value

    @field_validator("value_from")
    @classmethod
    def _check_value_from(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and (len(value) != 1 or next(iter(value)) not in ENV_VALUE_SOURCES):
            raise ValueError(f"must name exactly one of {', '.join(ENV_VALUE_SOURCES)}")
        return checked(value, core.env_var_schema(ENV_VALUE_SOURCES)["properties"]["valueFrom"])  # type: ignore[no-any-return]

    def manifest(self) -> dict[str, Any]:
        """The container ``env`` entry."""
        return self.model_dump(by_alias=True, exclude_none=True)


def env_problems(entries: list[EnvVarSpec]) -> list[str]:
    """Each name once, and each entry with a value or a valueFrom (not both)."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        first = seen.setdefault(entry.name, i)
        if first != i:
            problems.append(f"[{i}].name {entry.name!r} repeats [{first}]: each variable may be set once")
        if (entry.value is None) == (entry.value_from is None):
            problems.append(f"[{i}] ({entry.name}): set exactly one of value or valueFrom")
    return problems
