"""``memsync operator``: run the SessionMemory controller (kopf), or print the CRD.

``memsync operator [OPTIONS]`` and ``memsync operator run [OPTIONS]`` start the controller; ``memsync
operator crd`` prints the CustomResourceDefinition (``make crds`` writes it to ``crds/``).

Before it starts it reads the API server's version and refuses (exit 1, with an error log) below
Kubernetes 1.33, and below 1.33.6 and 1.34.2 (kubelets whose native sidecar startup probes can leave a
Pod Initializing forever; ``controller/kube.py``); then it asks API
discovery for every resource it serves (SessionMemories; AgentEnvironments with ``--environments``) and
refuses (exit 1, naming each missing group/version/resource) when one is not served: kopf would never look
it up again and idle.

The controller talks to the cluster with the credentials kopf uses: the in-cluster service account when it
runs in a Pod, else the kubeconfig (``KUBECONFIG``, ``--context``). Every option is also an environment
variable (shown in ``--help``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import kopf
from prometheus_client import start_http_server
from pydantic import TypeAdapter, ValidationError

from memsync.cli.failures import CliError, ExitCode, kube_exit_code
from memsync.controller import discovery
from memsync.controller.kube import KubeApi, KubeApiError, version_refusal, version_unknown
from memsync.controller.memtrace import install_from_env as install_memory_trace
from memsync.controller.sessionmemory.pod import DEFAULT_MEMORY_VOLUME_SIZE_LIMIT
from memsync.controller.sessionmemory.registry import build_memo, build_registry
from memsync.controller.settings import ControllerConfig, bounded_session, configure_settings
from memsync.crd import agentenv_schema
from memsync.crd.env_spec import EnvVarSpec, env_problems
from memsync.crd.models import BYTES_QUANTITY_MAX, BYTES_QUANTITY_PATTERN
from memsync.crd.schema import render_crd_yaml
from memsync.crd.spec_messages import describe_validation_error

logger = logging.getLogger("memsync.operator")

F = TypeVar("F", bound=Callable[..., Any])

PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _check_quantity(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if len(value) > BYTES_QUANTITY_MAX or re.fullmatch(BYTES_QUANTITY_PATTERN, value) is None:
        raise click.BadParameter(f"{value!r} is not a quantity of bytes such as 512Mi or 2Gi")
    return value


def _run_options(fn: F) -> F:
    """The controller's options; shared by ``memsync operator`` and ``memsync operator run``."""
    options = [
        click.option(
            "--namespace",
            "-n",
            "namespaces",
            multiple=True,
            envvar="MEMSYNC_NAMESPACES",
            show_envvar=True,
            metavar="NS",
            help="Serve only this namespace (repeatable; globs like 'agents-*' allowed). "
            "Env: whitespace-separated. Default: all namespaces.",
        ),
        click.option(
            "--environments/--no-environments",
            default=False,
            envvar="MEMSYNC_ENVIRONMENTS",
            show_envvar=True,
            help="Also serve AgentEnvironments: poll their work queues and start a session per claimed item "
            "(needs the AgentEnvironment CRD and the RBAC for Secrets and SessionMemories it creates).",
        ),
        click.option(
            "--all-namespaces",
            "-A",
            is_flag=True,
            envvar="MEMSYNC_ALL_NAMESPACES",
            show_envvar=True,
            help="Serve every namespace (the default when no --namespace is given).",
        ),
        click.option(
            "--agent-image",
            envvar="MEMSYNC_AGENT_IMAGE",
            show_envvar=True,
            default=None,
            metavar="IMAGE",
            help="Image of the memsync containers (mount and sync) in every sandbox Pod. Required.",
        ),
        click.option(
            "--agent-image-pull-policy",
            envvar="MEMSYNC_AGENT_IMAGE_PULL_POLICY",
            show_envvar=True,
            type=click.Choice(PULL_POLICIES),
            default="IfNotPresent",
            show_default=True,
        ),
        click.option(
            "--liveness",
            "liveness",
            envvar="MEMSYNC_OPERATOR_LIVENESS",
            show_envvar=True,
            default=None,
            metavar="URL",
            help="Serve kopf's liveness probe here, e.g. http://0.0.0.0:8080/healthz.",
        ),
        click.option(
            "--metrics-port",
            envvar="MEMSYNC_OPERATOR_METRICS_PORT",
            show_envvar=True,
            type=click.IntRange(0, 65535),
            default=0,
            show_default=True,
            help="Serve Prometheus metrics on this port (/metrics); 0 = off.",
        ),
        click.option(
            "--context",
            envvar="MEMSYNC_KUBE_CONTEXT",
            show_envvar=True,
            default=None,
            help="kubeconfig context (outside a cluster).",
        ),
        click.option(
            "--recheck-interval",
            envvar="MEMSYNC_RECHECK_INTERVAL",
            show_envvar=True,
            type=click.FloatRange(1.0),
            default=30.0,
            show_default=True,
            help="Seconds between re-checks of a SessionMemory refused before its Pod (missing Secret or "
            "key, duplicate session, invalid spec), and of an active session against its Pod.",
        ),
        click.option(
            "--service-account-wait",
            envvar="MEMSYNC_SERVICE_ACCOUNT_WAIT",
            show_envvar=True,
            type=click.FloatRange(0.0),
            default=60.0,
            show_default=True,
            help="Seconds a sandbox Pod refused because its ServiceAccount does not exist is retried (a new "
            "namespace's default one appears moments later) before the session fails with "
            "ServiceAccountNotFound.",
        ),
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
            "--memsync-env",
            envvar="MEMSYNC_OPERATOR_MEMSYNC_ENV",
            show_envvar=True,
            default=None,
            help="Extra environment of the memsync containers of every sandbox Pod, as a JSON list of "
            'container env entries (e.g. [{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]); a '
            "SessionMemory's spec.template.spec.memsync.env replaces an entry of the same name. memsync's "
            "own variables cannot be set this way.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def parse_memsync_env(raw: str | None) -> tuple[EnvVarSpec, ...]:
    """``--memsync-env``: a JSON list of env entries, validated as ``spec.template.spec.memsync.env`` is."""
    if raw is None or not raw.strip():
        return ()
    try:
        entries = TypeAdapter(list[EnvVarSpec]).validate_json(raw)
    except ValidationError as exc:
        raise click.BadParameter(
            describe_validation_error(exc, prefix="memsync-env"), param_hint="--memsync-env"
        ) from None
    problems = env_problems(entries)
    if problems:
        raise click.BadParameter("; ".join(problems), param_hint="--memsync-env")
    return tuple(entries)


@click.group("operator", invoke_without_command=True)
@_run_options
@click.pass_context
def operator(ctx: click.Context, /, **options: Any) -> None:
    """The SessionMemory controller. Without a subcommand it runs, as "memsync operator run" does."""
    if ctx.invoked_subcommand is None:
        _run(RunOptions(**options))


@operator.command("run")
@_run_options
def run(**options: Any) -> None:
    """Run the controller until SIGTERM/SIGINT."""
    _run(RunOptions(**options))


@operator.command("crd")
@click.option(
    "--resource",
    type=click.Choice(["sessionmemories", "agentenvironments"]),
    default="sessionmemories",
    show_default=True,
    help="Which of memsync's CustomResourceDefinitions to print.",
)
def crd(resource: str) -> None:
    """Print a CustomResourceDefinition as YAML (what "make crds" writes)."""
    render = render_crd_yaml if resource == "sessionmemories" else agentenv_schema.render_crd_yaml
    click.echo(render(), nl=False)


def _api_unusable(what: str, exc: Exception) -> CliError:
    """An API call that failed before the operator started: a refusal by its status, else unreachable."""
    code = kube_exit_code(exc.status) if isinstance(exc, KubeApiError) else ExitCode.UNREACHABLE
    return CliError(f"{what}: {exc}", code)


def _check_server_version(kube: KubeApi) -> None:
    """Refuse to start (exit 1, with an error log) against an API server older than the minimum."""
    try:
        info = asyncio.run(kube.server_version())
    except Exception as exc:  # KubeApiError, or the connection itself failed
        kube.close()
        logger.error("cannot read the Kubernetes API server's version", extra={"error": str(exc)})
        raise _api_unusable("cannot read the Kubernetes API server's version", exc) from exc
    refusal = version_refusal(info)
    if refusal is not None:
        kube.close()
        logger.error("unsupported Kubernetes version; not starting", extra={"error": refusal})
        raise click.ClickException(refusal)
    if version_unknown(info):
        logger.warning(
            "cannot tell the Kubernetes version or patch; starting anyway (a sidecar that never starts fails "
            "its session after --sidecar-start-timeout)",
            extra={"version": info},
        )


def _check_served_resources(kube: KubeApi, *, environments: bool) -> None:
    """Refuse to start (exit 1, with an error log) unless discovery serves every resource the operator
    serves: kopf would resolve a missing one never again and idle (``controller/discovery.py``)."""
    wanted = discovery.served_resources(environments=environments)
    try:
        found = asyncio.run(discovery.discover(kube, wanted))
    except Exception as exc:  # KubeApiError, or the connection itself failed
        kube.close()
        logger.error("cannot read the Kubernetes API discovery", extra={"error": str(exc)})
        raise _api_unusable("cannot read the Kubernetes API discovery", exc) from exc
    absent = discovery.missing(wanted, found)
    if absent:
        kube.close()
        message = discovery.missing_message(absent)
        logger.error(
            "a resource the operator serves is not served by the API server; not starting",
            extra={"missing": [str(r) for r in absent], "error": message},
        )
        raise click.ClickException(message)


@dataclass(frozen=True)
class RunOptions:
    """The options of ``memsync operator [run]``, as click parsed them."""

    namespaces: tuple[str, ...]
    all_namespaces: bool
    agent_image: str | None
    agent_image_pull_policy: str
    liveness: str | None
    metrics_port: int
    context: str | None
    recheck_interval: float
    service_account_wait: float
    sidecar_start_timeout: float
    memory_volume_size_limit: str
    memsync_env: str | None
    environments: bool


def _run(options: RunOptions) -> None:
    if options.namespaces and options.all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    install_memory_trace()  # only with MEMSYNC_TRACEMALLOC set: a debugging aid
    if not options.agent_image:
        raise click.UsageError(
            "--agent-image (or MEMSYNC_AGENT_IMAGE) is required: the image of the memsync "
            "containers in the sandbox Pods, normally the operator's own image"
        )
    patterns = any(ch in ns for ns in options.namespaces for ch in "*?[!")
    config = ControllerConfig(
        agent_image=options.agent_image,
        agent_image_pull_policy=options.agent_image_pull_policy,
        recheck_interval=options.recheck_interval,
        service_account_wait=options.service_account_wait,
        sidecar_start_timeout=options.sidecar_start_timeout,
        memory_volume_size_limit=options.memory_volume_size_limit,
        memsync_env=parse_memsync_env(options.memsync_env),
        environments=options.environments,
    )
    settings = configure_settings(
        kopf.OperatorSettings(),
        namespace_patterns=patterns,
        reporting_instance=os.environ.get("POD_NAME") or socket.gethostname(),
    )
    try:
        kube = KubeApi.from_environment(context=options.context)
    except Exception as exc:  # kubernetes.config.ConfigException and file errors
        raise click.ClickException(f"cannot configure the Kubernetes client: {exc}") from None

    _check_server_version(kube)
    _check_served_resources(kube, environments=options.environments)

    async def login(**_: Any) -> kopf.ConnectionInfo | kopf.AiohttpSession:
        info = kube.connection_info()
        if patterns:  # kopf watches every namespace that matches: no bound on the watches it holds
            return info
        # One watch of SessionMemories and one of Pods, per namespace served (or cluster-wide).
        return bounded_session(info, watches=2 * max(len(options.namespaces), 1))

    if options.metrics_port:
        start_http_server(options.metrics_port)
    logger.info(
        "starting the memsync operator",
        extra={
            "namespaces": list(options.namespaces) or "all",
            "agent_image": options.agent_image,
            "liveness": options.liveness,
            "metrics_port": options.metrics_port or None,
        },
    )
    try:
        kopf.run(
            registry=build_registry(config, login=login),
            settings=settings,
            memo=build_memo(kube, config),
            standalone=True,
            liveness_endpoint=options.liveness,
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
        )
    finally:
        kube.close()
