"""The simulated nodes of the fleet benchmark: kwok's configuration, its Stages, and the Node objects.

kwok plays each Node and Pod it manages through Stages: a selector over the object, an optional delay, and
a patch of its status rendered from a Go template. There are no default stages; these are the benchmark's:

- ``fleet-node-ready``: a new Node turns Ready (its conditions, addresses, phase; its capacity is the one
  the benchmark created it with), once. kwok renews each Node's Lease by itself
  (``nodeLeaseDurationSeconds``), so the controller manager keeps it Ready;
- ``fleet-node-heartbeat``: a Ready Node's status conditions are refreshed every few minutes;
- ``fleet-pod-running``: a Pending Pod bound to a kwok Node runs: every container started, running and
  ready, the native sidecar (``memsync-sync``, an init container with ``restartPolicy: Always``) too;
  ``memsync-mount`` ended with exit code 0 and a mount report as its termination message (the agent's
  report contract, ``render_report``), as after a real mount; each Pod gets the next free address of the
  loopback range as its Pod IP;
- ``fleet-pod-end``: a running Pod that the benchmark labels ``END_LABEL=true`` ends as a session does: the
  sandbox exits 0, memsync-sync exits 0 leaving a complete final flush report, the Pod Succeeds;
- ``fleet-pod-delete``: a Pod being deleted goes at once (there is no process to stop).

The sandbox Pods land only on these Nodes: the Nodes carry ``NODE_TAINT`` and ``NODE_LABEL``, and the
benchmark's SessionMemories ask for them through their template (``placement``).
"""

from __future__ import annotations

import json
from typing import Any, Final

import yaml

from memsync.contracts.report import FlushReport, MountReport, StoreCounts, render_report
from memsync.controller.sessionmemory.pod import MOUNT_CONTAINER, SYNC_CONTAINER

#: kwok manages the Nodes that carry this annotation (and only those).
MANAGED_ANNOTATION: Final = ("kwok.x-k8s.io/node", "fake")
NODE_LABEL: Final = ("type", "kwok")
NODE_TAINT: Final = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
#: The label that ends a running Pod (fleet-pod-end).
END_LABEL: Final = "bench.memsync.dev/end"
#: Pod IPs: the next free address of this range for each new Pod (never 127.0.0.1, shared with everything).
POD_CIDR: Final = "127.100.0.0/16"
NODE_IP: Final = "127.0.0.1"
NODE_CAPACITY: Final = {"cpu": "1k", "memory": "4Ti", "pods": "128", "ephemeral-storage": "10Ti"}
#: Sessions per Node: the capacity leaves room, so the scheduler never runs short at N = 5,000 on 50 Nodes.
PODS_PER_NODE: Final = 100

#: The one store every benchmark session syncs.
STORE_ID: Final = "memstore_fleet"

MOUNT_MESSAGE: Final = render_report(MountReport(memories={STORE_ID: 0}))
FLUSH_MESSAGE: Final = render_report(
    FlushReport(complete=True, stores={STORE_ID: StoreCounts()}, totals={STORE_ID: StoreCounts()})
)


def placement() -> dict[str, Any]:
    """The sandbox template's scheduling fields that put a Pod on a kwok Node and nowhere else."""
    key, value = NODE_LABEL
    toleration = {"key": NODE_TAINT["key"], "operator": "Equal", "value": NODE_TAINT["value"]}
    return {"nodeSelector": {key: value}, "tolerations": [{**toleration, "effect": NODE_TAINT["effect"]}]}


def node_count(sessions: int) -> int:
    return max(1, -(-sessions // PODS_PER_NODE))


def node(index: int) -> dict[str, Any]:
    """A kwok Node: managed (annotation), labelled and tainted for the sandboxes, with its capacity."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"kwok-{index:03d}",
            "annotations": {MANAGED_ANNOTATION[0]: MANAGED_ANNOTATION[1]},
            "labels": {NODE_LABEL[0]: NODE_LABEL[1], "kubernetes.io/hostname": f"kwok-{index:03d}"},
        },
        "spec": {"taints": [NODE_TAINT]},
        "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY},
    }


def _quoted(text: str) -> str:
    """``text`` as a YAML scalar inside a template (JSON's double-quoted string is one)."""
    out = json.dumps(text)
    assert "{{" not in out, "a literal in a Go template must not open an action"
    return out


# The Go templates render the status patch (YAML) from the object (``.``). kwok's functions: Now and Quote;
# NodeIP for a Node; NodeIPWith and PodIPsWith (the next free address of the range, kept per Pod) for a Pod.
#: (type, status, reason) of a healthy Node's conditions.
_CONDITIONS: Final = (
    ("Ready", "True", "KubeletReady"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID"),
)
_NODE_CONDITIONS = "\n      {{ $now := Now }}\n      conditions:" + "".join(
    f"""
      - type: {kind}
        status: "{status}"
        reason: {reason}
        message: simulated by kwok for the fleet benchmark
        lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ or .metadata.creationTimestamp $now | Quote }}}}"""
    for kind, status, reason in _CONDITIONS
)

_NODE_READY = (
    _NODE_CONDITIONS
    + """
      addresses:
      - type: InternalIP
        address: {{ NodeIP | Quote }}
      - type: Hostname
        address: {{ .metadata.name | Quote }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: kwok
        kubeProxyVersion: kwok
        containerRuntimeVersion: kwok
        kernelVersion: kwok
        osImage: kwok
        machineID: ""
        bootID: ""
        systemUUID: ""
      phase: Running
"""
)

_POD_RUNNING = """
      {{ $now := Now }}
      {{ $began := $now }}
      {{ $finished := $now }}
      conditions:
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      STATUS_HEAD
        {{ if eq (or .restartPolicy "") "Always" }}
        ready: true
        started: true
        state: {running: {startedAt: {{ $now | Quote }}}}
        {{ else }}
        ENDED
            {{ if eq .name "MOUNT_CONTAINER" }}message: MOUNT_MESSAGE{{ end }}
        {{ end }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      STATUS_HEAD
        ready: true
        started: true
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      {{ with PodIPsWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"""

_POD_END = """
      {{ $now := Now }}
      {{ $began := or .status.startTime $now }}
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      {{ $finished := $began }}
      {{ if eq (or .restartPolicy "") "Always" }}{{ $finished = $now }}{{ end }}
      STATUS_HEAD
        ENDED
            {{ if eq .name "MOUNT_CONTAINER" }}message: MOUNT_MESSAGE{{ end }}
            {{ if eq .name "SYNC_CONTAINER" }}message: FLUSH_MESSAGE{{ end }}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      {{ $finished := $now }}
      STATUS_HEAD
        ENDED
      {{ end }}
      phase: Succeeded
"""


# A container's status entry, inside a range over containers: its first lines, and the state of one that
# ended well (between the template's ``$began`` and ``$finished``).
_STATUS_HEAD: Final = """- name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        restartCount: 0"""
_ENDED: Final = """ready: false
        started: false
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $began | Quote }}
            finishedAt: {{ $finished | Quote }}"""


def _template(text: str) -> str:
    for name, value in (
        ("STATUS_HEAD", _STATUS_HEAD),
        ("ENDED", _ENDED),
        ("MOUNT_CONTAINER", MOUNT_CONTAINER),
        ("SYNC_CONTAINER", SYNC_CONTAINER),
        ("MOUNT_MESSAGE", _quoted(MOUNT_MESSAGE)),
        ("FLUSH_MESSAGE", _quoted(FLUSH_MESSAGE)),
    ):
        text = text.replace(name, value)
    lines = (line[6:] if line.startswith(" " * 6) else line for line in text.strip("\n").splitlines())
    return "\n".join(line.rstrip() for line in lines)


def _stage(
    name: str,
    kind: str,
    selector: list[dict[str, Any]],
    step: dict[str, Any],
    delay: tuple[int, int] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": selector},
        "steps": [step],
    }
    if delay is not None:
        spec["delay"] = {"durationMilliseconds": delay[0], "jitterDurationMilliseconds": delay[1]}
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _status(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "template": _template(template)}}


def _is(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_NOT_DELETING = _is(".metadata.deletionTimestamp", "DoesNotExist")


def stages() -> list[dict[str, Any]]:
    """Every Stage the benchmark's kwok plays."""
    return [
        _stage("fleet-node-ready", "Node", [_is(_READY, "NotIn", "True")], _status(_NODE_READY)),
        _stage(
            "fleet-node-heartbeat",
            "Node",
            [_is(".status.phase", "In", "Running"), _is(_READY, "In", "True")],
            _status(_NODE_CONDITIONS),
            delay=(240_000, 270_000),
        ),
        _stage(
            "fleet-pod-running",
            "Pod",
            [_NOT_DELETING, _is(".spec.nodeName", "Exists"), _is(".status.phase", "In", "Pending")],
            _status(_POD_RUNNING),
        ),
        _stage(
            "fleet-pod-end",
            "Pod",
            [
                _NOT_DELETING,
                _is(f'.metadata.labels["{END_LABEL}"]', "In", "true"),
                _is(".status.phase", "In", "Running"),
            ],
            _status(_POD_END),
        ),
        _stage("fleet-pod-delete", "Pod", [_is(".metadata.deletionTimestamp", "Exists")], {"delete": True}),
    ]


def kwok_config(pod_parallelism: int = 16) -> str:
    """kwok's ``--config``: its options and every Stage, as one multi-document YAML."""
    options = {
        "cidr": POD_CIDR,
        "nodeIP": NODE_IP,
        "manageNodesWithAnnotationSelector": "=".join(MANAGED_ANNOTATION),
        "nodeLeaseDurationSeconds": 40,
        # Every number set: kwok fills in its defaults only when it is given no configuration at all.
        "podPlayStageParallelism": pod_parallelism,
        "nodePlayStageParallelism": 4,
        "nodeLeaseParallelism": 4,
        "podsOnNodeSyncParallelism": 1,
        "enablePodsOnNodeSyncListPager": True,
        "enablePodsOnNodeSyncStreamWatch": False,
        "manageAllNodes": False,
    }
    documents = [
        {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": options}
    ]
    return yaml.dump_all([*documents, *stages()], Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    """Writes a template (a string of several lines) as a literal block, as a person would."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _string)
