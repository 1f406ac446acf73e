"""The options of ``memsync operator`` about the sessions' sandbox Pods: how long a session may take to
start, the stores' folder and the memsync containers' ephemeral storage, lost nodes. Each is also an
environment variable (shown in ``--help``); ``cli/operator.py`` adds them to its own."""

from __future__ import annotations

import re
from typing import Any

import click

from memsync.controller.sessionmemory.pod import (
    DEFAULT_EPHEMERAL_STORAGE_LIMIT,
    DEFAULT_MEMORY_VOLUME_SIZE_LIMIT,
)
from memsync.controller.settings import DEFAULT_START_DEADLINE
from memsync.crd.models import BYTES_QUANTITY_MAX, BYTES_QUANTITY_PATTERN


def _check_quantity(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if len(value) > BYTES_QUANTITY_MAX or re.fullmatch(BYTES_QUANTITY_PATTERN, value) is None:
        raise click.BadParameter(f"{value!r} is not a quantity of bytes such as 512Mi or 2Gi")
    return value


def _check_optional_quantity(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return None if value is None else _check_quantity(ctx, param, value)


def session_pod_options() -> list[Any]:
    """The options (click decorators) about the sessions' Pods."""
    return [
        click.option(
            "--sidecar-start-timeout",
            envvar="MEMSYNC_SIDECAR_START_TIMEOUT",
            show_envvar=True,
            type=click.FloatRange(10.0),
            default=300.0,
            show_default=True,
            help="Seconds memsync-sync may take to start (its startupProbe to pass) after the stores were "
            "mounted before the session fails with SidecarNotStarted and its Pod is deleted "
            "(spec.sync.sidecarStartSeconds replaces it per session).",
        ),
        click.option(
            "--memory-volume-size-limit",
            envvar="MEMSYNC_MEMORY_VOLUME_SIZE_LIMIT",
            show_envvar=True,
            default=DEFAULT_MEMORY_VOLUME_SIZE_LIMIT,
            show_default=True,
            callback=_check_quantity,
            help="Size limit of the stores' folder in every sandbox Pod (an emptyDir), also memsync-sync's "
            "ephemeral-storage request (spec.sync.memoryVolumeSizeLimit replaces it per session).",
        ),
        click.option(
            "--memsync-ephemeral-storage-request",
            envvar="MEMSYNC_EPHEMERAL_STORAGE_REQUEST",
            show_envvar=True,
            default=None,
            callback=_check_optional_quantity,
            help="Ephemeral-storage request of the memsync containers of every sandbox Pod. Default: the "
            "stores' folder's size limit (spec.template.spec.memsync.resources replaces it per session).",
        ),
        click.option(
            "--memsync-ephemeral-storage-limit",
            envvar="MEMSYNC_EPHEMERAL_STORAGE_LIMIT",
            show_envvar=True,
            default=DEFAULT_EPHEMERAL_STORAGE_LIMIT,
            show_default=True,
            callback=_check_quantity,
            help="Ephemeral-storage limit of the memsync containers of every sandbox Pod, never below the "
            "request (a LimitRange's default limit is then never applied to them, and a "
            "limits.ephemeral-storage quota finds one). It also bounds the Pod as a whole when the sandbox "
            "container sets none: the kubelet evicts a Pod over the sum of its containers' limits.",
        ),
        click.option(
            "--start-deadline",
            envvar="MEMSYNC_START_DEADLINE",
            show_envvar=True,
            type=click.FloatRange(10.0),
            default=DEFAULT_START_DEADLINE,
            show_default=True,
            help="Seconds from a SessionMemory's creation (or restart) to its sandbox container running "
            "before the session fails with StartTimeout and its Pod is deleted (spec.startDeadlineSeconds "
            "replaces it per session).",
        ),
        click.option(
            "--node-lost-grace",
            envvar="MEMSYNC_NODE_LOST_GRACE",
            show_envvar=True,
            type=click.FloatRange(0.0),
            default=60.0,
            show_default=True,
            help="Seconds a sandbox Pod's node may be NotReady or Unknown before the session is NodeLost (a "
            "node that is gone or tainted node.kubernetes.io/out-of-service is lost at once).",
        ),
        click.option(
            "--force-delete-lost-pods/--no-force-delete-lost-pods",
            envvar="MEMSYNC_FORCE_DELETE_LOST_PODS",
            show_envvar=True,
            default=False,
            show_default=True,
            help="Force-delete a lost node's sandbox Pod once it had its grace period after the node was "
            "lost, so its name, a restart or a namespace's deletion need not wait for the node. The risk: "
            "a node that comes back later still runs the old Pod's containers for a moment.",
        ),
    ]
