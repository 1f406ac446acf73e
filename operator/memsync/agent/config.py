"""The sync agent's configuration: one validated model built from environment variables or flags.

The variables are the operator's contract with the agent (docs/design.md#the-sync-agents-contract).

Every error names the field and what is allowed. The work-item secret is kept as a ``SecretStr`` so it never
shows up in ``repr()``, logs or error messages; it is decoded only where a client is built.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, TypedDict, Unpack

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from memsync.agent import messages
from memsync.api import json_text
from memsync.api.constants import MAX_STORES_PER_SESSION
from memsync.api.ids import id_problem
from memsync.api.models import Deletions
from memsync.api.paths import default_mount_path, is_ancestor, is_clean_absolute_path
from memsync.contracts import env
from memsync.contracts.env import ConflictPolicy
from memsync.contracts.stores import StoreEntry

MIN_INTERVAL_S = 5.0
DEFAULT_INTERVAL_S = 15.0
DEFAULT_FLUSH_TIMEOUT_S = 30.0
DEFAULT_DELETE_WINDOW_S = 30.0  # docs/sync-semantics.md#deletes: how long a deletion must be confirmed
DEFAULT_STATE_DIR = "/var/lib/memsync"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

_NO_STORES = (
    f"stores ({env.STORES}): at least 1 store, or {env.STORES_FROM_SESSION!r} to read them from the session"
)


class ConfigError(ValueError):
    """The configuration is invalid; the message names the field and what is allowed."""


def _checked_id(value: str) -> str:
    """An id goes into request paths and state file names: the shared id rule, checked before any request."""
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class StoreConfig(StoreEntry):
    """One attached store, as the operator lists it in ``MEMSYNC_STORES``, validated."""

    @field_validator("memory_store_id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _checked_id(value)

    @model_validator(mode="after")
    def _mount_path(self) -> StoreConfig:
        if not self.mount_path:
            object.__setattr__(self, "mount_path", default_mount_path(self.name, self.memory_store_id))
        if not is_clean_absolute_path(self.mount_path):
            raise ValueError(
                f"{messages.NOT_CLEAN_PATH}: {self.mount_path!r} (it must start with '/' and have no empty, "
                "'.' or '..' segment, no trailing '/', no NUL or backslash)"
            )
        return self

    @property
    def read_only(self) -> bool:
        return self.access == "read_only"


def _finite(name: str, value: float) -> float:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    return value


class AgentConfig(BaseModel):
    """Everything ``memsync mount|sync|flush`` takes from the environment (see docs/design.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stores: Annotated[list[StoreConfig], Field(max_length=MAX_STORES_PER_SESSION)]
    # MEMSYNC_STORES=session: ``stores`` is empty until ``memsync mount`` reads them from the session.
    stores_from_session: bool = False
    interval: float = DEFAULT_INTERVAL_S
    early_sync: bool = True  # docs/sync-agent.md#early-sync
    deletions: Deletions = "enabled"
    conflict_policy: ConflictPolicy = "storeWins"
    flush_timeout: float = DEFAULT_FLUSH_TIMEOUT_S
    state_dir: str = DEFAULT_STATE_DIR
    base_url: str | None = None
    work_secret: SecretStr | None = None
    termination_log: str = DEFAULT_TERMINATION_LOG
    metrics_port: int | None = None
    session_id: str | None = None
    # Test-only (documented as such): remap every absolute path under this directory; shorten the window.
    test_root: str | None = None
    delete_window: float = DEFAULT_DELETE_WINDOW_S

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: float) -> float:
        _finite("interval", value)
        if value < MIN_INTERVAL_S:
            raise ValueError(f"must be at least {MIN_INTERVAL_S:g} seconds, got {value!r}")
        return value

    @field_validator("flush_timeout")
    @classmethod
    def _flush_timeout(cls, value: float) -> float:
        _finite("flush_timeout", value)
        if not 0 < value <= 3600:
            raise ValueError(f"must be more than 0 and at most 3600 seconds, got {value!r}")
        return value

    @field_validator("delete_window")
    @classmethod
    def _delete_window(cls, value: float) -> float:
        _finite("delete_window", value)
        if value < 0:
            raise ValueError(f"must be 0 or more seconds, got {value!r}")
        return value

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str | None) -> str | None:
        return None if value is None else _checked_id(value)

    @field_validator("metrics_port")
    @classmethod
    def _port(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= 65535:
            raise ValueError(f"must be a TCP port 0-65535 (0 picks a free one), got {value!r}")
        return value

    @field_validator("state_dir", "termination_log")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value:
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    @field_validator("test_root")
    @classmethod
    def _test_root(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\x00" in value):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value or None

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is not None and value and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an absolute http(s) URL, got {value!r}")
        return value or None

    @model_validator(mode="after")
    def _unique(self) -> AgentConfig:
        if not self.stores and not self.stores_from_session:
            raise ValueError(_NO_STORES)
        ids = [s.memory_store_id for s in self.stores]
        dup_ids = sorted({i for i in ids if ids.count(i) > 1})
        if dup_ids:
            raise ValueError(f"stores: each memory_store_id may appear once; repeated: {', '.join(dup_ids)}")
        paths = [s.mount_path for s in self.stores]
        for i, a in enumerate(paths):
            for b in paths[i + 1 :]:
                if a == b:
                    raise ValueError(f"stores: each mount_path may appear once; repeated: {a}")
                if is_ancestor(a, b) or is_ancestor(b, a):
                    raise ValueError(f"stores: mount paths must not nest inside each other: {a} and {b}")
        return self

    # --- filesystem paths (with the test-only remapping) ------------------------------------------------

    def local(self, absolute: str) -> Path:
        """Where an absolute path of the configuration lives on this machine (``MEMSYNC_TEST_ROOT``)."""
        if self.test_root is None:
            return Path(absolute)
        return Path(self.test_root) / PurePosixPath(absolute).relative_to("/")

    def mount_dir(self, store: StoreConfig) -> Path:
        return self.local(store.mount_path)

    @property
    def state_path(self) -> Path:
        return self.local(self.state_dir)

    @property
    def termination_path(self) -> Path:
        return self.local(self.termination_log)

    def secret_value(self) -> str | None:
        return self.work_secret.get_secret_value() if self.work_secret is not None else None


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        loc = ".".join(str(x) for x in item["loc"]) or "configuration"
        head = str(item["loc"][0]) if item["loc"] else ""
        if head in _ENV_NAMES:
            loc = f"{loc} ({_ENV_NAMES[head]})"
        msg = item["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


_ENV_NAMES = {
    "stores": env.STORES,
    "interval": env.SYNC_INTERVAL,
    "early_sync": env.EARLY_SYNC,
    "deletions": env.SYNC_DELETIONS,
    "conflict_policy": env.CONFLICT_POLICY,
    "flush_timeout": env.FLUSH_TIMEOUT,
    "state_dir": env.STATE_DIR,
    "base_url": env.BASE_URL,
    "termination_log": env.TERMINATION_LOG,
    "metrics_port": env.METRICS_PORT,
    "session_id": env.SESSION_ID,
    "test_root": env.TEST_ROOT,
    "delete_window": env.TEST_DELETE_WINDOW,
}


def _number(field: str, raw: str | float | None) -> float | None:
    if raw is None or raw == "":
        return None
    if isinstance(raw, int | float):
        return float(raw)
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(
            f"{field} ({_ENV_NAMES[field]}): must be a number of seconds, got {raw!r}"
        ) from None


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _switch(field: str, raw: str | bool) -> bool:
    if isinstance(raw, bool):
        return raw
    word = raw.strip().lower()
    if word in _TRUE + _FALSE:
        return word in _TRUE
    raise ConfigError(f"{field} ({_ENV_NAMES[field]}): must be true or false, got {raw!r}")


class RawSettings(TypedDict, total=False):
    """The settings besides the stores, raw: strings from the environment or flags (numbers from tests)."""

    interval: str | float | None
    early_sync: str | bool | None
    deletions: str | None
    conflict_policy: str | None
    flush_timeout: str | float | None
    state_dir: str | None
    base_url: str | None
    work_secret: str | None
    termination_log: str | None
    metrics_port: str | int | None
    session_id: str | None
    test_root: str | None
    delete_window: str | float | None


def load_config(*, stores: str | list[dict[str, Any]] | None, **raw: Unpack[RawSettings]) -> AgentConfig:
    """Build and validate the configuration from raw values (strings from the environment or flags).

    Raises ``ConfigError`` naming the field (and its environment variable) and what is allowed; never echoes
    the secret.
    """
    parsed, from_session = _parse_stores(stores)
    values: dict[str, Any] = {"stores": parsed, "stores_from_session": from_session, **_settings(raw)}
    try:
        return AgentConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _parse_stores(stores: str | list[dict[str, Any]] | None) -> tuple[list[Any], bool]:
    """The stores as a list (empty when they come from the session), and whether they do."""
    if stores is None or (isinstance(stores, str) and not stores.strip()):
        raise ConfigError(
            f"stores ({env.STORES}): required, a JSON array of 1-8 stores or {env.STORES_FROM_SESSION!r}"
        )
    from_session = isinstance(stores, str) and stores.strip() == env.STORES_FROM_SESSION
    if from_session:
        stores = []
    if isinstance(stores, str):
        try:
            parsed = json_text.loads(stores)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"stores ({env.STORES}): not valid JSON ({exc.msg} at {exc.pos})") from None
        except ValueError as exc:  # nested too deeply, or a number too long to convert
            raise ConfigError(f"stores ({env.STORES}): not valid JSON ({exc})") from None
    else:
        parsed = stores
    if not isinstance(parsed, list):
        raise ConfigError(f"stores ({env.STORES}): must be a JSON array of store objects")
    if not parsed and not from_session:
        raise ConfigError(_NO_STORES)
    return parsed, from_session


def _settings(raw: RawSettings) -> dict[str, Any]:
    """The settings given (an empty or absent value keeps the default), numbers parsed."""
    given: Mapping[str, Any] = raw
    values: dict[str, Any] = {}
    for name in ("interval", "flush_timeout", "delete_window"):
        number = _number(name, given.get(name))
        if number is not None:
            values[name] = number
    early_sync = given.get("early_sync")
    if early_sync is not None and early_sync != "":
        values["early_sync"] = _switch("early_sync", early_sync)
    for name in ("deletions", "conflict_policy", "base_url"):
        if text := given.get(name):
            values[name] = str(text).strip()
    for name in ("state_dir", "termination_log", "session_id", "test_root"):
        if text := given.get(name):
            values[name] = text
    work_secret = raw.get("work_secret")
    if work_secret is not None and work_secret.strip():
        values["work_secret"] = SecretStr(work_secret)
    metrics_port = raw.get("metrics_port")
    if metrics_port is not None and metrics_port != "":
        try:
            values["metrics_port"] = int(metrics_port)
        except ValueError:
            raise ConfigError(
                f"metrics_port ({env.METRICS_PORT}): must be an integer, got {metrics_port!r}"
            ) from None
    return values


def with_stores(config: AgentConfig, stores: list[StoreEntry]) -> AgentConfig:
    """``config`` with the stores read from the session (validated like ``MEMSYNC_STORES``)."""
    values = {**dict(config), "stores": [s.model_dump() for s in stores], "stores_from_session": False}
    try:
        return AgentConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
