"""The operator's start-up check of API discovery (``controller/discovery.py``): which resources it serves,
which of them discovery lacks, and the message it exits with."""

from __future__ import annotations

from memsync.controller.discovery import (
    AGENT_ENVIRONMENTS,
    SESSION_MEMORIES,
    Discovered,
    missing,
    missing_message,
    served_resources,
)
from memsync.crd import agentenv
from memsync.crd.models import GROUP, PLURAL, VERSION

BOTH: Discovered = {
    (GROUP, VERSION): frozenset({PLURAL}),
    (GROUP, agentenv.VERSION): frozenset({agentenv.PLURAL}),
}


def test_the_operator_serves_session_memories_and_environments_only_with_the_add_on() -> None:
    assert served_resources(environments=False) == (SESSION_MEMORIES,)
    assert served_resources(environments=True) == (SESSION_MEMORIES, AGENT_ENVIRONMENTS)
    assert str(SESSION_MEMORIES) == f"{GROUP}/{VERSION}/{PLURAL}"
    assert str(AGENT_ENVIRONMENTS) == f"{GROUP}/{agentenv.VERSION}/{agentenv.PLURAL}"


def test_nothing_is_missing_when_discovery_serves_every_resource() -> None:
    assert missing(served_resources(environments=True), BOTH) == []


def test_a_group_version_that_is_not_served_misses_its_resources() -> None:
    # The CRD's version is gone or not served: discovery answers 404 for the group/version.
    found: Discovered = {**BOTH, (GROUP, VERSION): None}
    assert missing(served_resources(environments=True), found) == [SESSION_MEMORIES]


def test_a_served_group_version_without_the_plural_misses_it() -> None:
    # Another CRD of the group serves the same version, this one is not installed (or not Established).
    found: Discovered = {(GROUP, VERSION): frozenset({"others"}), (GROUP, agentenv.VERSION): None}
    assert missing(served_resources(environments=True), found) == [SESSION_MEMORIES, AGENT_ENVIRONMENTS]
    assert missing(served_resources(environments=False), {}) == [SESSION_MEMORIES]


def test_the_message_names_each_missing_resource_its_crd_and_what_to_do() -> None:
    text = missing_message([AGENT_ENVIRONMENTS])
    assert f"{GROUP}/{agentenv.VERSION}/{agentenv.PLURAL} is not served by the API server" in text
    assert f"CustomResourceDefinition {agentenv.CRD_NAME}" in text
    assert f"without version {agentenv.VERSION} served" in text
    assert "helm upgrade never changes them" in text
    both = missing_message([SESSION_MEMORIES, AGENT_ENVIRONMENTS])
    assert both.count("is not served by the API server") == 2
