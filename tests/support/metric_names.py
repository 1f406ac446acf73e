"""The Prometheus series names memsync exports, read from the metrics the code registers (the sync agent's
registry and the operator's collectors), for the tests that check the shipped rules and dashboard."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import metrics as client_metrics
from prometheus_client.core import Metric

from memsync.agent.metrics import Metrics
from memsync.controller import metrics as operator_metrics

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


def operator_families() -> list[Metric]:
    wrappers = [v for v in vars(operator_metrics).values() if isinstance(v, client_metrics.MetricWrapperBase)]
    return [family for w in wrappers for family in w.describe()]


def store_server_families() -> list[Metric]:
    from memsync.server.http import observe

    wrappers = [v for v in vars(observe).values() if isinstance(v, client_metrics.MetricWrapperBase)]
    return [family for w in wrappers for family in w.describe()]


#: The store server's load-shedding counter, by the name agreed with the change that adds it (the dashboard
#: draws it already); once the server registers it, it is read from the code like every other name.
AGREED_STORE_SERIES = {"memsync_store_requests_shed_total": "counter"}


def exported() -> dict[str, str]:
    return {
        **AGREED_STORE_SERIES,
        **series_names(agent_families()),
        **series_names(operator_families()),
        **series_names(store_server_families()),
    }
