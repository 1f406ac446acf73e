"""Request bodies and the fields every domain of the store server checks, as pure functions.

A body is parsed strictly (JSON with bounded depth and number sizes, no NaN or Infinity, an object at the top)
and validated by a pydantic model into one 400 message naming the field; text fields must be valid Unicode
without U+0000. Each raises ``ApiError`` (plain data) or returns a value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memsync.api.ids import id_problem
from memsync.server.errors import ApiError, invalid

M = TypeVar("M", bound=BaseModel)

# --- request bodies -------------------------------------------------------------------------------------


MAX_JSON_DEPTH = 16  # every request body of this API nests at most 3 levels (resources[i].instructions)
MAX_JSON_NUMBER_CHARS = (
    100  # no field of this API is a number; a longer one is refused before it is converted
)


def _reject_constant(name: str) -> Any:
    raise invalid(
        f"request body is not valid JSON: {name} is not a JSON value (RFC 8259 has no NaN or Infinity)"
    )


def _parse_int(text: str) -> int:
    if len(text) > MAX_JSON_NUMBER_CHARS:
        raise invalid(
            f"request body holds a {len(text)}-digit number; at most {MAX_JSON_NUMBER_CHARS} are accepted"
        )
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_JSON_NUMBER_CHARS:
        raise invalid(
            f"request body holds a {len(text)}-character number; at most {MAX_JSON_NUMBER_CHARS} are accepted"
        )
    return float(text)


def _lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (JSON's ``\\ud800`` makes one), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _tree_problem(value: Any) -> ApiError | None:
    """A 400 naming the first field nested deeper than ``MAX_JSON_DEPTH`` or holding text that is not valid
    Unicode (a value or a field name), or None; walked iteratively."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, str):
            at = _lone_surrogate(node)
            if at is not None:
                return invalid(
                    f"field {where!r} is not valid Unicode: it holds a lone surrogate at character {at}"
                )
            continue
        if isinstance(node, dict):
            bad = next((k for k in node if _lone_surrogate(k) is not None), None)
            if bad is not None:  # its name is not shown: no JSON answer can carry it
                return invalid(
                    f"a field name in {where or 'the body'!r} is not valid Unicode (a lone surrogate)"
                )
            children = [(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()]
        elif isinstance(node, list):
            children = [(v, f"{where}[{i}]") for i, v in enumerate(node)]
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return _depth_error(where or "body")
        stack.extend((child, name, depth + 1) for child, name in children)
    return None


def _depth_error(where: str | None) -> ApiError:
    at = f" (at field {where!r})" if where else ""
    return invalid(f"request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels{at}")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what is wrong with it: not UTF-8, not strict JSON
    (NaN and Infinity included), a number of absurd length, nested deeper than ``MAX_JSON_DEPTH``, or a
    string that is not valid Unicode (a lone surrogate, which JSON's ``\\ud800`` escapes can make and no
    database column can store)."""
    if not raw.strip():
        raise invalid("request body is empty; a JSON object is required")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"request body is not valid UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(
            text, parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float
        )
    except json.JSONDecodeError as exc:
        raise invalid(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        # The decoder recurses once per level: far past MAX_JSON_DEPTH it gives up before we can look.
        raise _depth_error(None) from None
    if not isinstance(value, dict):
        raise invalid(f"request body must be a JSON object, got {type(value).__name__}")
    problem = _tree_problem(value)
    if problem is not None:
        raise problem
    return value


def _field_name(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "body"


def describe_validation_error(model: type[BaseModel], exc: ValidationError) -> str:
    """One sentence per problem, each naming the field and what is allowed."""
    allowed = ", ".join(model.model_fields)
    parts: list[str] = []
    for err in exc.errors():
        name = _field_name(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            if len(err["loc"]) == 1:
                parts.append(f"unknown field {name!r} in request body (allowed: {allowed})")
            else:
                parts.append(f"unknown field {name!r} in request body")
        elif kind == "missing":
            parts.append(f"missing required field {name!r}")
        else:
            parts.append(f"field {name!r}: {err['msg']}")
    return "; ".join(parts) or f"request body does not match {model.__name__}"


def parse_body(model: type[M], raw: bytes) -> M:
    data = parse_json_object(raw)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(describe_validation_error(model, exc)) from None


# --- text fields ----------------------------------------------------------------------------------------


def utf8_bytes(value: str, what: str) -> bytes:
    """``value`` as UTF-8, or a 400 when it holds a lone surrogate (possible through JSON ``\\ud800``)."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid(
            f"{what} is not valid Unicode: it contains a lone surrogate at character {exc.start}"
        ) from None


def validate_stored_text(value: str, what: str) -> bytes:
    """A free-text field as UTF-8; U+0000 is refused (no backend's text columns can hold it)."""
    data = utf8_bytes(value, what)
    if "\x00" in value:
        raise invalid(f"{what} must not contain U+0000 (NUL)")
    return data


KEY_NAME_MAX = 64


def validate_key_name(name: str, noun: str = "admin key") -> str:
    """A named key's name: 1-64 ASCII letters, digits, '.', '_' or '-'."""
    if not 1 <= len(name) <= KEY_NAME_MAX or not all(
        ch.isascii() and (ch.isalnum() or ch in "._-") for ch in name
    ):
        raise invalid(
            f"{noun} name must be 1 to {KEY_NAME_MAX} ASCII letters, digits, '.', '_' or '-', got {name!r}"
        )
    return name


def validate_session_id(session_id: str) -> str:
    if not session_id.startswith("sesn_") or len(session_id) <= len("sesn_"):
        raise invalid(f"session_id must start with 'sesn_' and name a session, got {session_id!r}")
    if len(session_id) > 128 or not all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in session_id):
        raise invalid("session_id may hold only ASCII letters, digits, '_' and '-' (at most 128 characters)")
    return session_id


def validate_id(value: str, what: str) -> str:
    """An id a request names (in its path, a filter or its body): the id rule every memsync process shares
    (``memsync.api.ids``). Whatever breaks it names nothing this server issued, and some of it no database
    can even be asked about (PostgreSQL refuses a U+0000 in any text): a 400 naming ``what``, never echoing
    the value (it may be a credential pasted in the wrong place)."""
    problem = id_problem(value)
    if problem is not None:
        raise invalid(f"{what}: {problem}")
    return value
