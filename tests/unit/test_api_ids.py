"""One id rule for the agent, the command line and the store server, and the access log's redaction."""

from __future__ import annotations

import pytest

from memsync.api.ids import MAX_ID_LENGTH, id_problem, looks_like_credential
from memsync.server.environments.service import ENVIRONMENT_KEY_PREFIX
from memsync.server.http.observe import redact_path
from memsync.server.ids import (
    ADMIN_KEY_PREFIX,
    MEMORY_PREFIX,
    SESSION_PREFIX,
    STORE_PREFIX,
    VERSION_PREFIX,
    new_admin_key,
    new_id,
    new_sessions_token,
)


@pytest.mark.parametrize("prefix", [STORE_PREFIX, MEMORY_PREFIX, VERSION_PREFIX, SESSION_PREFIX])
def test_every_id_the_server_issues_passes(prefix: str) -> None:
    assert id_problem(new_id(prefix)) is None


def test_every_credential_the_server_issues_is_refused_and_never_echoed() -> None:
    for credential in (new_sessions_token(), new_admin_key(), "sk-ant-api03-" + "x" * 40, " SK-ANT-x"):
        assert looks_like_credential(credential)
        problem = id_problem(credential)
        assert problem is not None and "credential" in problem
        assert credential.strip() not in problem
    assert ADMIN_KEY_PREFIX.startswith("sk-")
    assert looks_like_credential(ENVIRONMENT_KEY_PREFIX + new_id(""))
    assert redact_path(f"/v1/environments/env_01/work/{ENVIRONMENT_KEY_PREFIX}abc") == (
        "/v1/environments/env_01/work/[redacted]"
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("memstore_01/../x", "'/' at position 12"),
        ("mem 01", "' ' at position 4"),
        ("mem\x0001", "U+0000"),
        ("_memstore", "starts with a letter or a digit"),
        ("m" * (MAX_ID_LENGTH + 1), f"at most {MAX_ID_LENGTH}"),
    ],
)
def test_an_id_of_the_wrong_shape_says_why(value: str, words: str) -> None:
    problem = id_problem(value)
    assert problem is not None and words in problem


def test_the_access_log_path_redacts_credential_segments_only() -> None:
    token = new_sessions_token()
    assert redact_path(f"/v1/memory_stores/{token}/memories") == "/v1/memory_stores/[redacted]/memories"
    assert redact_path(f"/v1/sessions/{new_admin_key()}") == "/v1/sessions/[redacted]"
    plain = "/v1/memory_stores/memstore_01/memories/mem_02"
    assert redact_path(plain) == plain
    assert redact_path("/") == "/"
