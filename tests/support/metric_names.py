"""The Prometheus series names memsync exports, read from the metrics the code registers (the sync agent's
registry, the operator's collectors and the store server's), for the tests that check the shipped rules
and dashboard."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import metrics as client_metrics
from prometheus_client.core import Metric

from memsync.agent.metrics import Metrics
from memsync.controller import metrics as operator_metrics
from memsync.server.http import admission as store_admission
from memsync.server.http import observe as store_observe

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def series_names(families: Iterable[Metric]) -> dict[str, str]:
    """Every series name a scrape can show, mapped to its family's type (``counter``, ``gauge``, ...)."""
    names: dict[str, str] = {}
    for family in families:
        for suffix in SUFFIXES[family.type]:
            names[family.name + suffix] = family.type
    return names


def agent_families() -> list[Metric]:
    return list(Metrics().registry.collect())


def module_families(*modules: object) -> list[Metric]:
    """The families of the metrics registered at module level (the operator's, the store server's)."""
    wrappers = [
        v
        for module in modules
        for v in vars(module).values()
        if isinstance(v, client_metrics.MetricWrapperBase)
    ]
    return [family for w in wrappers for family in w.describe()]


def operator_families() -> list[Metric]:
    return module_families(operator_metrics)


def exported() -> dict[str, str]:
    return {
        **series_names(agent_families()),
        **series_names(operator_families()),
        **series_names(module_families(store_observe, store_admission)),
    }
