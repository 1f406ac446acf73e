"""An offline stand-in for what the API server does to a SessionMemory before storing it.

``admit(obj, old=None)`` runs, in the API server's order: defaulting from the CRD schema, the structural
OpenAPI schema (with strict field validation: unknown fields are errors), then every CEL rule of
``x-kubernetes-validations``, executed with cel-python (``celpy``). Transition rules (those using
``oldSelf``) run only when ``old`` is given, like on an UPDATE.

cel-python implements standard CEL. Our rules use only standard CEL (``all``, ``exists_one``, ``has``,
``matches``, ``startsWith``, comparisons); ``matches`` is replaced here by one with RE2's anchoring (``$``
matches only at the very end of the text, as in the API server), checked by the tests at the bottom.

Other test modules import from here (``from test_crd_apiserver import admit``).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator
from typing import Any

import celpy
import jsonschema
from celpy import celtypes

from memsync.crd.schema import build_crd

_MISSING: Any = object()


def go_regex(pattern: str) -> re.Pattern[str]:
    """Compile an RE2-style pattern for Python: a final ``$`` must not match before a trailing newline."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


# --- CEL ----------------------------------------------------------------------------------------------------


def _matches(value: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.BoolType:
    return celtypes.BoolType(go_regex(pattern).search(value) is not None)


CEL_FUNCTIONS: dict[str, Any] = {"matches": _matches}
_ENV = celpy.Environment()


@functools.cache
def cel_program(rule: str) -> celpy.Runner:
    return _ENV.program(_ENV.compile(rule), functions=CEL_FUNCTIONS)


def cel_eval(rule: str, **variables: Any) -> Any:
    """Evaluate ``rule`` with JSON-like ``variables`` (``self=...``, ``oldSelf=...``)."""
    activation = {name: celpy.json_to_cel(value) for name, value in variables.items()}
    return cel_program(rule).evaluate(activation)


def is_transition_rule(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def _correlate(schema: dict[str, Any], item: Any, old_list: Any) -> Any:
    """The old element of a list-type=map list with the same keys (Kubernetes' correlation), or missing."""
    keys = schema.get("x-kubernetes-list-map-keys")
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old_list, list):
        return _MISSING
    for old in old_list:
        if isinstance(old, dict) and isinstance(item, dict) and all(old.get(k) == item.get(k) for k in keys):
            return old
    return _MISSING


def cel_errors(schema: dict[str, Any], value: Any, old: Any = _MISSING, path: str = "") -> list[str]:
    """Run every CEL rule of ``schema`` (recursively) against ``value``; one message per failed rule."""
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations", []):
        transition = is_transition_rule(rule["rule"])
        if transition and old is _MISSING:
            continue
        variables = {"self": value}
        if transition:
            variables["oldSelf"] = old
        result = cel_eval(rule["rule"], **variables)
        if isinstance(result, celtypes.BoolType) and bool(result):
            continue
        detail = "" if isinstance(result, celtypes.BoolType) else f" (evaluation error: {result})"
        errors.append(f"{path or '<root>'}{rule.get('fieldPath', '')}: {rule['message']}{detail}")
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                old_sub = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                errors += cel_errors(sub, value[key], old_sub, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += cel_errors(schema["items"], item, _correlate(schema, item, old), f"{path}[{i}]")
    return errors


# --- structural schema, defaults ----------------------------------------------------------------------------


def to_json_schema(schema: Any) -> Any:
    """The OpenAPI node as plain JSON Schema: x-kubernetes-* dropped; objects with declared properties and no
    ``x-kubernetes-preserve-unknown-fields`` refuse unknown fields (``kubectl``'s strict field validation)."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: to_json_schema(v)
        for k, v in schema.items()
        if not k.startswith("x-kubernetes-") and k != "properties"
    }
    if "properties" in schema:
        out["properties"] = {k: to_json_schema(v) for k, v in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    out.pop("default", None)
    return out


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    if isinstance(instance, str) and not go_regex(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _pattern})


@functools.cache
def _validator(schema_json: str) -> Any:
    return _Validator(to_json_schema(json.loads(schema_json)))


def structural_errors(schema: dict[str, Any], value: Any) -> list[str]:
    validator = _validator(json.dumps(schema, sort_keys=True))
    return [
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    ]


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fill absent fields from ``default`` (recursively, defaults first then their own sub-defaults)."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    elif isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


@functools.cache
def _crd_schema() -> str:
    return json.dumps(build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def openapi_schema() -> dict[str, Any]:
    """The CRD's schema (a fresh copy: callers may change it)."""
    schema: dict[str, Any] = json.loads(_crd_schema())
    return schema


def admit(obj: dict[str, Any], old: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(the object as it would be stored, the API server's errors) for a create (``old`` None) or update."""
    schema = openapi_schema()
    stored = apply_defaults(schema, copy.deepcopy(obj))
    errors = structural_errors(schema, stored)
    if errors:
        return stored, errors
    old_stored = apply_defaults(schema, copy.deepcopy(old)) if old is not None else _MISSING
    return stored, cel_errors(schema, stored, old_stored)


# --- the shim ---------------------------------------


def test_matches_behaves_like_re2() -> None:
    assert cel_eval("'foobar'.matches('^fo*bar$')")
    assert not cel_eval("'foobar\\n'.matches('^fo*bar$')"), "RE2: '$' must not match before a final newline"
    assert cel_eval("'foobar'.matches('oba')"), "CEL matches is a search, not a full match"
    assert cel_eval("'/mnt/memory/a'.startsWith('/mnt/memory' + '/')")


def test_transition_rules_are_skipped_on_create_and_run_on_update() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "a is immutable"}]}}}  # fmt: skip
    assert cel_errors(schema, {"a": "x"}) == []
    assert cel_errors(schema, {"a": "x"}, {"a": "x"}) == []
    assert cel_errors(schema, {"a": "y"}, {"a": "x"}) == [".a: a is immutable"]


def test_defaults_fill_nested_objects() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "object", "default": {}, "properties": {
        "n": {"type": "integer", "default": 15}, "m": {"type": "string"}}}}}  # fmt: skip
    assert apply_defaults(schema, {}) == {"s": {"n": 15}}
    assert apply_defaults(schema, {"s": {"n": 7}}) == {"s": {"n": 7}}


def test_structural_validation_is_strict_about_unknown_fields_and_anchors() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x$"}}}
    assert structural_errors(schema, {"a": "x"}) == []
    assert structural_errors(schema, {"a": "x\n"}) != []
    assert structural_errors(schema, {"b": 1}) != []
    open_schema = {**schema, "x-kubernetes-preserve-unknown-fields": True}
    assert structural_errors(open_schema, {"b": 1}) == []
