"""The AgentEnvironment CustomResourceDefinition, built from the constants of :mod:`memsync.crd.agentenv`.

The sandbox Pod template, the sync settings and the Secret reference reuse the SessionMemory CRD's schema
pieces, so both resources accept exactly the same values there.
Regenerate the checked-in file with
``memsync operator crd --resource agentenvironments > crds/agentenvironments.agents.memsync.dev.yaml``
(or ``make crds``).
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from memsync.api.constants import DEFAULT_BASE_URL
from memsync.crd import agentenv as a
from memsync.crd import models as m
from memsync.crd.sandbox_schema import template_schema
from memsync.crd.schema import condition_schema, crd_document, start_deadline_node, sync_schema
from memsync.crd.schema_nodes import count_node, rule, string_node


def secret_ref_schema(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["name", "key"],
        "properties": {
            "name": string_node("Secret name.", pattern=m.SECRET_NAME_PATTERN, maxLength=m.SECRET_NAME_MAX),
            "key": string_node(
                "Key in the Secret.", pattern=m.SECRET_KEY_PATTERN, maxLength=m.SECRET_KEY_MAX
            ),
        },
    }


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The environment whose work queue the operator polls, and how each session's sandbox "
        "Pod and memory are set up.",
        "required": ["environmentId", "environmentKeySecretRef", "template"],
        "properties": {
            "environmentId": string_node(
                "The self-hosted environment (env_...); immutable.",
                pattern=a.ENVIRONMENT_ID_PATTERN,
                maxLength=a.ENVIRONMENT_ID_MAX,
                **{
                    "x-kubernetes-validations": [
                        rule("self == oldSelf", "environmentId is immutable: create a new AgentEnvironment")
                    ]
                },
            ),
            "environmentKeySecretRef": secret_ref_schema(
                "The Secret key (in this namespace) holding the environment key; only the operator reads it, "
                "it never enters a Pod."
            ),
            "apiBaseUrl": string_node(
                "The API serving the environment, its sessions and their memory stores.",
                pattern=m.API_BASE_URL_PATTERN,
                maxLength=m.API_BASE_URL_MAX,
                default=DEFAULT_BASE_URL,
            ),
            "template": template_schema(),
            "sync": sync_schema(),
            "maxConcurrentSessions": {
                "type": "integer",
                "description": "Sessions running at once; no work is claimed while this many are active.",
                "minimum": a.MAX_CONCURRENT_MIN,
                "maximum": a.MAX_CONCURRENT_MAX,
                "default": a.MAX_CONCURRENT_DEFAULT,
            },
            "finishedRetentionSeconds": {
                "type": "integer",
                "description": "How long a finished (Succeeded or Failed) SessionMemory is kept before the "
                "operator deletes it with its Secret.",
                "minimum": a.RETENTION_MIN,
                "maximum": a.RETENTION_MAX,
                "default": a.RETENTION_DEFAULT,
            },
            "startDeadlineSeconds": {
                **start_deadline_node(),
                "description": "Seconds from a claimed session's SessionMemory's creation to its sandbox "
                "running; past them its work item is force-stopped (the operator stops heartbeating it "
                "then). Unset: the operator's --start-deadline (600).",
            },
            "workerId": string_node(
                "The prefix of the worker id sent with every poll (Anthropic-Worker-ID): "
                "<workerId>.<operator host>-<token new at each start>. Default: <namespace>.<name>.",
                pattern=a.WORKER_ID_PATTERN,
                maxLength=a.WORKER_ID_MAX,
            ),
        },
    }


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "What the operator observed.",
        "properties": {
            "phase": string_node(
                "Pending, Polling, Degraded (backing off) or Failed.", enum=list(a.ENVIRONMENT_PHASES)
            ),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "conditions": {
                "type": "array",
                "items": condition_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "active": count_node("Sessions whose SessionMemory has not finished."),
            "claimed": count_node("Work items claimed since the AgentEnvironment was created."),
            "succeeded": count_node("Sessions that ended Succeeded."),
            "failed": count_node(
                "Sessions that ended Failed, and work items failed before a session started."
            ),
            "lastPollTime": string_node("When the queue was last polled successfully.", format="date-time"),
            "lastError": string_node("The latest error, if the last pass failed.", maxLength=m.MESSAGE_MAX),
            a.STATUS_HELD_HEARTBEATS: {
                "type": "object",
                "description": (
                    "Work items whose lease the operator holds until their Pod's runner takes it over, by "
                    "work id: the last heartbeat value it holds each with (a new leader of the operator goes "
                    "on from there)."
                ),
                "additionalProperties": {"type": "string", "maxLength": 128},
                "maxProperties": 1000,
            },
            "tally": {
                "type": "object",
                "description": "The operator's running counts behind claimed, succeeded and failed.",
                "properties": {
                    name: count_node(text)
                    for name, text in (
                        ("claimed", "Work items claimed."),
                        ("itemsFailed", "Work items failed before their session started."),
                        ("retiredSucceeded", "Succeeded SessionMemories removed after their retention."),
                        ("retiredFailed", "Failed SessionMemories removed after their retention."),
                    )
                },
            },
        },
    }


def printer_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Environment", "type": "string", "jsonPath": ".spec.environmentId"},
        {"name": "Active", "type": "integer", "jsonPath": ".status.active"},
        {"name": "Max", "type": "integer", "jsonPath": ".spec.maxConcurrentSessions"},
        {"name": "Succeeded", "type": "integer", "jsonPath": ".status.succeeded", "priority": 1},
        {"name": "Failed", "type": "integer", "jsonPath": ".status.failed", "priority": 1},
        {"name": "Last Poll", "type": "date", "jsonPath": ".status.lastPollTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def build_crd() -> dict[str, Any]:
    """The AgentEnvironment CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    return crd_document(
        names={
            "kind": a.KIND,
            "listKind": a.LIST_KIND,
            "plural": a.PLURAL,
            "singular": a.SINGULAR,
            "shortNames": list(a.SHORT_NAMES),
        },
        version=a.VERSION,
        description="AgentEnvironment makes the operator a self-hosted environment: it claims the "
        "environment's session work items and runs one sandbox Pod with its memory (a SessionMemory) per "
        "session.",
        spec=spec_schema(),
        status=status_schema(),
        columns=printer_columns(),
    )


HEADER: Final = (
    "# Generated from operator/memsync/crd/agentenv_schema.py: do not edit by hand.\n"
    "# Regenerate: memsync operator crd --resource agentenvironments \\\n"
    "#               > crds/agentenvironments.agents.memsync.dev.yaml\n"
    "#         or: make crds\n"
)


def render_crd_yaml() -> str:
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=120, allow_unicode=True)
