"""Bounded waits on answers the API gives while a cause is expected to go away by itself.

A Pod whose ServiceAccount does not exist is refused with a 403 by the ServiceAccount admission plugin. For
the ``default`` ServiceAccount of a namespace just created, the serviceaccount controller makes it within
moments; for a ``serviceAccountName`` nobody creates, it never comes. So the operator retries the create for
``service_account_wait`` seconds from the first such answer, then records the refusal
``ServiceAccountNotFound`` (a status and a Warning Event, re-checked like every refusal before a Pod).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: The ServiceAccount a Pod runs as when its template names none.
DEFAULT_SERVICE_ACCOUNT: Final = "default"


def service_account_of(raw_spec: Mapping[str, Any]) -> str:
    """The ServiceAccount the sandbox Pod asks for: ``spec.template.spec.serviceAccountName``, or default."""
    template = raw_spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    name = pod_spec.get("serviceAccountName") if isinstance(pod_spec, Mapping) else None
    return name if isinstance(name, str) and name else DEFAULT_SERVICE_ACCOUNT


def wait_is_over(first_seen: float, now: float, wait: float) -> bool:
    """True once ``wait`` seconds have passed since the cause was first seen (monotonic seconds)."""
    return now - first_seen >= wait


def missing_service_account_message(service_account: str, namespace: str, waited: float) -> str:
    """The ``ServiceAccountNotFound`` refusal's message (names the field and what to do)."""
    field = (
        "the namespace's default ServiceAccount"
        if service_account == DEFAULT_SERVICE_ACCOUNT
        else "spec.template.spec.serviceAccountName"
    )
    return (
        f"ServiceAccount {service_account} ({field}) does not exist in namespace {namespace} after "
        f"{waited:.0f} s; create it or name an existing one: no Pod was created (re-checked periodically)"
    )
