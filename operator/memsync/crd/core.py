"""The Kubernetes core/v1 types of the sandbox Pod template, and a structural validator for them.

``core_v1.json`` is generated from the pinned Kubernetes release's OpenAPI v3 document by
``memsync.devtools.core_schema`` (never edited by hand). This module loads it, adds the bounds the CRD's CEL
rules need (every list and string a rule walks has ``maxItems``/``maxLength``, so the API server's cost
estimate stays within its budget) and checks a value against the result the way the API server checks a
custom resource against a structural schema with strict field validation: types, unknown fields, required
fields, bounds, patterns and the keys of ``x-kubernetes-list-type: map`` lists.

The CRD (``memsync.crd.schema``) embeds exactly these schemas and the pydantic model
(``memsync.crd.models.SandboxTemplate``) validates with :func:`schema_problems` over them, so the two agree on
every field's shape; the CEL rules on top are mirrored by ``memsync.crd.guards``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

#: Bounds on what the CEL rules walk (and so on what a template may hold).
CONTAINERS_MAX: Final = 1
PORTS_MAX: Final = 64
VOLUMES_MAX: Final = 32
VOLUME_MOUNTS_MAX: Final = 32
CAPABILITIES_MAX: Final = 64
CAPABILITY_MAX: Final = 64
SECURITY_STRING_MAX: Final = 256
PROC_MOUNT_MAX: Final = 64
PATH_MAX: Final = 1024
#: A volume name is a DNS label.
VOLUME_NAME_MAX: Final = 63
METADATA_ENTRIES_MAX: Final = 64


@functools.cache
def _generated() -> dict[str, Any]:
    text = resources.files("memsync.crd").joinpath("core_v1.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def source() -> str:
    """Which OpenAPI document the schemas were generated from (module@version/path)."""
    return str(_generated()["source"])


def _bound(node: dict[str, Any], **bounds: Any) -> None:
    node.update(bounds)


@functools.cache
def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(_generated()["podSpec"])
    props = spec["properties"]
    containers = props["containers"]
    _bound(containers, minItems=1, maxItems=CONTAINERS_MAX)
    container = containers["items"]
    container["required"] = sorted({*container.get("required", []), "name", "image"})
    cprops = container["properties"]
    _bound(cprops["name"], maxLength=VOLUME_NAME_MAX)
    _bound(cprops["image"], minLength=1)
    _bound(cprops["restartPolicy"], maxLength=PROC_MOUNT_MAX)
    _bound(cprops["ports"], maxItems=PORTS_MAX)
    mounts = cprops["volumeMounts"]
    _bound(mounts, maxItems=VOLUME_MOUNTS_MAX)
    _bound(mounts["items"]["properties"]["mountPath"], maxLength=PATH_MAX)
    _bound(mounts["items"]["properties"]["name"], maxLength=VOLUME_NAME_MAX)
    sc = cprops["securityContext"]["properties"]
    add = sc["capabilities"]["properties"]["add"]
    _bound(add, maxItems=CAPABILITIES_MAX)
    _bound(add["items"], maxLength=CAPABILITY_MAX)
    _bound(sc["procMount"], maxLength=PROC_MOUNT_MAX)
    for field in ("type", "user", "role"):
        _bound(sc["seLinuxOptions"]["properties"][field], maxLength=SECURITY_STRING_MAX)
    _bound(sc["appArmorProfile"]["properties"]["type"], maxLength=SECURITY_STRING_MAX)
    _bound(sc["seccompProfile"]["properties"]["type"], maxLength=SECURITY_STRING_MAX)
    volumes = props["volumes"]
    _bound(volumes, maxItems=VOLUMES_MAX)
    _bound(volumes["items"]["properties"]["name"], maxLength=VOLUME_NAME_MAX)
    _bound(props["activeDeadlineSeconds"], minimum=1)
    return spec


def pod_spec_schema() -> dict[str, Any]:
    """The template's PodSpec fields (containers fully typed, volumes limited), bounded; a fresh copy."""
    return copy.deepcopy(_pod_spec())


def object_meta_schema() -> dict[str, Any]:
    """ObjectMeta's labels and annotations, each bounded to :data:`METADATA_ENTRIES_MAX` entries."""
    meta: dict[str, Any] = copy.deepcopy(_generated()["objectMeta"])
    for field in meta["properties"].values():
        _bound(field, maxProperties=METADATA_ENTRIES_MAX)
    return meta


def resource_requirements_schema() -> dict[str, Any]:
    return copy.deepcopy(_generated()["resourceRequirements"])


def env_var_schema(sources: tuple[str, ...]) -> dict[str, Any]:
    """core/v1 EnvVar whose ``valueFrom`` may name only ``sources`` (e.g. secretKeyRef, configMapKeyRef)."""
    env = copy.deepcopy(_generated()["podSpec"]["properties"]["containers"]["items"]["properties"]["env"])
    value_from = env["items"]["properties"]["valueFrom"]
    value_from["properties"] = {k: v for k, v in value_from["properties"].items() if k in sources}
    return dict(env["items"])


@functools.cache
def pod_field(name: str) -> dict[str, Any]:
    """The (bounded) schema of one PodSpec field of the template."""
    node: dict[str, Any] = _pod_spec()["properties"][name]
    return node


# --- structural validation ---------------------------------------------------------------------------------

_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (Mapping,),
    "array": (list,),
}


def _type_ok(schema: Mapping[str, Any], value: Any) -> str | None:
    """None when ``value`` has the schema's type, else what was expected."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        return None if ok else "an integer or a string"
    kind = schema.get("type")
    if kind is None:
        return None
    ok = isinstance(value, _TYPES[kind]) and not (kind in ("integer", "number") and isinstance(value, bool))
    return None if ok else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


@functools.cache
def _regex(pattern: str) -> re.Pattern[str]:
    """An RE2 pattern for Python: a final ``$`` matches only at the very end, as in the API server."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def _bounds(schema: Mapping[str, Any], value: Any) -> list[str]:
    out: list[str] = []
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"must be at most {schema['maxLength']} characters")
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"must be at least {schema['minLength']} character(s)")
        if "pattern" in schema and _regex(schema["pattern"]).search(value) is None:
            out.append(f"must match {schema['pattern']}")
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"may list at most {schema['maxItems']} entries")
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"must list at least {schema['minItems']} entries")
    elif isinstance(value, Mapping):
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            out.append(f"may hold at most {schema['maxProperties']} entries")
    elif isinstance(value, int | float) and "minimum" in schema and value < schema["minimum"]:
        out.append(f"must be at least {schema['minimum']}")
    return out


def _list_key_problems(schema: Mapping[str, Any], value: list[Any], path: str) -> list[str]:
    if schema.get("x-kubernetes-list-type") != "map":
        return []
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: dict[tuple[Any, ...], int] = {}
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            continue
        key = tuple(item.get(k) for k in keys)
        first = seen.setdefault(key, i)
        if first != i:
            named = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
            out.append(f"{path}[{i}]: repeats {path}[{first}] ({named}): each entry must be unique")
    return out


def schema_problems(schema: Mapping[str, Any], value: Any, path: str) -> list[str]:
    """Every way ``value`` breaks ``schema`` (structural, strict about unknown fields), as
    ``<path>: <what is allowed>`` lines. ``None`` counts as absent (the API server drops such nulls)."""
    if value is None:
        return []
    wrong = _type_ok(schema, value)
    if wrong is not None:
        return [f"{path}: must be {wrong}"]
    out = [f"{path}: {problem}" for problem in _bounds(schema, value)]
    if isinstance(value, Mapping):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for field in schema.get("required", []):
            if value.get(field) is None:
                out.append(f"{path}.{field}: is required")
        for key, sub in value.items():
            if key in props:
                out += schema_problems(props[key], sub, f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), Mapping):
                out += schema_problems(schema["additionalProperties"], sub, f"{path}.{key}")
            elif props:
                out.append(
                    f"{path}.{key}: is not a field of the Pod template (check the spelling and nesting)"
                )
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += schema_problems(schema["items"], item, f"{path}[{i}]")
        out += _list_key_problems(schema, value, path)
    return out
