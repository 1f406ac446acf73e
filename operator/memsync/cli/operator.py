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

Replicas elect a leader through a Lease (``controller/leadership/``): only the holder acts, the others stand
by and take over when it stops renewing; ``--no-leader-elect`` runs a single replica without a Lease (for
development). What one process does is ``controller/runtime.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import kopf
from prometheus_client import start_http_server
from pydantic import TypeAdapter, ValidationError

from memsync import __version__
from memsync.cli.failures import CliError, ExitCode, kube_exit_code
from memsync.cli.operator_options import session_pod_options
from memsync.controller import discovery, runtime
from memsync.controller.kube import KubeApi, KubeApiError, version_refusal, version_unknown
from memsync.controller.leadership.fence import Fence
from memsync.controller.leadership.lease import Timings
from memsync.controller.liveness import Bounds
from memsync.controller.memtrace import install_from_env as install_memory_trace
from memsync.controller.runtime import Election, Process
from memsync.controller.settings import ControllerConfig, configure_settings
from memsync.crd import agentenv_schema
from memsync.crd.env_spec import EnvVarSpec, env_problems
from memsync.crd.schema import render_crd_yaml
from memsync.crd.spec_messages import describe_validation_error

logger = logging.getLogger("memsync.operator")

F = TypeVar("F", bound=Callable[..., Any])

PULL_POLICIES = ("Always", "IfNotPresent", "Never")


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
            help="Serve the liveness probe here, e.g. http://0.0.0.0:8080/healthz: it fails when a watch has "
            "heard nothing, the periodic loop stalled or ended, or the leader election stalled.",
        ),
        click.option(
            "--liveness-watch-silence",
            envvar="MEMSYNC_LIVENESS_WATCH_SILENCE",
            show_envvar=True,
            type=click.FloatRange(10.0),
            default=Bounds.watch_silence_s,
            show_default=True,
            help="Seconds a watch of the API server may receive nothing before the probe fails.",
        ),
        click.option(
            "--liveness-periodic-stall",
            envvar="MEMSYNC_LIVENESS_PERIODIC_STALL",
            show_envvar=True,
            type=click.FloatRange(5.0),
            default=Bounds.periodic_stall_s,
            show_default=True,
            help="Seconds the periodic loop may complete no round before the probe fails.",
        ),
        click.option(
            "--leader-elect/--no-leader-elect",
            envvar="MEMSYNC_LEADER_ELECT",
            show_envvar=True,
            default=True,
            show_default=True,
            help="Act only while holding the leader election's Lease (run two replicas: one acts, one stands "
            "by). --no-leader-elect: a single replica for development; never run two of those.",
        ),
        click.option(
            "--leader-election-namespace",
            envvar="MEMSYNC_LEADER_ELECTION_NAMESPACE",
            show_envvar=True,
            default=None,
            metavar="NS",
            help="Namespace of the Lease. Default: the operator Pod's namespace (POD_NAMESPACE, else its "
            "service account's), else 'default'.",
        ),
        click.option(
            "--leader-election-id",
            envvar="MEMSYNC_LEADER_ELECTION_ID",
            show_envvar=True,
            default="memsync-operator",
            show_default=True,
            metavar="NAME",
            help="Name of the Lease (one per operator installation).",
        ),
        click.option(
            "--lease-duration",
            envvar="MEMSYNC_LEASE_DURATION",
            show_envvar=True,
            type=click.FloatRange(1.0),
            default=Timings.lease_duration,
            show_default=True,
            help="Seconds a standby waits, after the leader's last renewal, before it takes the Lease.",
        ),
        click.option(
            "--renew-deadline",
            envvar="MEMSYNC_RENEW_DEADLINE",
            show_envvar=True,
            type=click.FloatRange(0.5),
            default=Timings.renew_deadline,
            show_default=True,
            help="Seconds the leader may go without renewing the Lease before it stops (it exits with "
            "status 8); less than --lease-duration.",
        ),
        click.option(
            "--retry-period",
            envvar="MEMSYNC_RETRY_PERIOD",
            show_envvar=True,
            type=click.FloatRange(0.1),
            default=Timings.retry_period,
            show_default=True,
            help="Seconds between the leader's renewals and a standby's tries; less than --renew-deadline.",
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
    options += session_pod_options()
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
    memsync_ephemeral_storage_request: str | None
    memsync_ephemeral_storage_limit: str
    start_deadline: float
    node_lost_grace: float
    force_delete_lost_pods: bool
    memsync_env: str | None
    environments: bool
    liveness_watch_silence: float
    liveness_periodic_stall: float
    leader_elect: bool
    leader_election_namespace: str | None
    leader_election_id: str
    lease_duration: float
    renew_deadline: float
    retry_period: float


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace() -> str:
    """The operator Pod's namespace: POD_NAMESPACE (the downward API), else its service account's."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def _election(options: RunOptions, identity: str) -> Election | None:
    if not options.leader_elect:
        return None
    timings = Timings(options.lease_duration, options.renew_deadline, options.retry_period)
    problems = timings.problems()
    if problems:
        raise click.UsageError(
            "leader election timings (--lease-duration, --renew-deadline, --retry-period): "
            + "; ".join(problems)
        )
    namespace = options.leader_election_namespace or _own_namespace()
    return Election(namespace, options.leader_election_id, identity, timings)


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
        ephemeral_storage_request=options.memsync_ephemeral_storage_request,
        ephemeral_storage_limit=options.memsync_ephemeral_storage_limit,
        start_deadline=options.start_deadline,
        node_lost_grace=options.node_lost_grace,
        force_delete_lost_pods=options.force_delete_lost_pods,
        memsync_env=parse_memsync_env(options.memsync_env),
        environments=options.environments,
    )
    replica = os.environ.get("POD_NAME") or socket.gethostname()
    # A new name at every start: a restarted container is a new candidate, never the holder it was.
    identity = f"{replica}_{secrets.token_hex(4)}"
    election = _election(options, identity)
    settings = configure_settings(
        kopf.OperatorSettings(), namespace_patterns=patterns, reporting_instance=replica
    )
    try:
        kube = KubeApi.from_environment(context=options.context)
    except Exception as exc:  # kubernetes.config.ConfigException and file errors
        raise click.ClickException(f"cannot configure the Kubernetes client: {exc}") from None
    user_agent = f"memsync-operator/{__version__} ({identity})"
    kube.user_agent = user_agent  # an audit log tells which replica made each request

    _check_server_version(kube)
    _check_served_resources(kube, environments=options.environments)

    if options.metrics_port:
        start_http_server(options.metrics_port)
    process = Process(
        settings=settings,
        namespaces=options.namespaces,
        patterns=patterns,
        election=election,
        liveness_url=options.liveness,
        liveness_bounds=Bounds(
            watch_silence_s=options.liveness_watch_silence, periodic_stall_s=options.liveness_periodic_stall
        ),
        user_agent=user_agent,
    )
    logger.info(
        "starting the memsync operator",
        extra={
            "namespaces": list(options.namespaces) or "all",
            "agent_image": options.agent_image,
            "liveness": options.liveness,
            "metrics_port": options.metrics_port or None,
            "identity": identity,
            "lease": f"{election.namespace}/{election.name}" if election else None,
        },
    )
    try:
        asyncio.run(runtime.run(kube, config, process, fence=Fence(elected=election is not None)))
    finally:
        kube.close()
