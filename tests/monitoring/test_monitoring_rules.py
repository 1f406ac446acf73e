"""The shipped monitoring (manifests/components/monitoring): every metric the alert rules and the Grafana
dashboard query is one memsync registers, with the right type; ``promtool check rules`` accepts the rules and
``promtool test rules`` runs rules_test.yaml against them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.metric_names import exported
from support.tools import BUILD_TIMEOUT_S, tool

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "manifests" / "components" / "monitoring"
METRIC = re.compile(r"\bmemsync_[a-z_]+\b")
#: The alerts the operations docs tell you to have.
ALERTS = {
    "MemsyncSyncFailing",
    "MemsyncFlushIncomplete",
    "MemsyncConflictsRising",
    "MemsyncRefusedFiles",
    "MemsyncOperatorErrors",
}


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"][
        "groups"
    ]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


def test_the_recommended_alerts_exist() -> None:
    assert {rule["alert"] for rule in rules()} >= ALERTS


@pytest.mark.parametrize(
    "queries",
    [
        pytest.param(lambda: [r["expr"] for r in rules()], id="rules"),
        pytest.param(dashboard_queries, id="dashboard"),
    ],
)
def test_every_query_names_metrics_memsync_exports(queries: Any) -> None:
    names = exported()
    for query in queries():
        used = set(METRIC.findall(query))
        assert used, f"queries no memsync metric: {query}"
        unknown = used - set(names)
        assert not unknown, f"{sorted(unknown)} are not exported by memsync (query: {query})"
        for name in used:
            # rate() and increase() suit counters and histogram buckets; gauges are read as is.
            if re.search(rf"\b(rate|increase)\(\s*{name}\b", query):
                assert names[name] in ("counter", "histogram"), f"{name} is a {names[name]}: {query}"
            else:
                assert names[name] in ("gauge", "counter"), f"{name} ({names[name]}) unexpected in {query}"


def write_rules(directory: Path) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False))
    return path


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_promtool_check_rules(tmp_path: Path) -> None:
    promtool = tool("promtool")
    result = subprocess.run(
        [str(promtool), "check", "rules", str(write_rules(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout + result.stderr


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_promtool_test_rules(tmp_path: Path) -> None:
    promtool = tool("promtool")
    write_rules(tmp_path)
    shutil.copy(Path(__file__).parent / "rules_test.yaml", tmp_path / "rules_test.yaml")
    result = subprocess.run(
        [str(promtool), "test", "rules", "rules_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_is_unit_tested() -> None:
    cases = yaml.safe_load((Path(__file__).parent / "rules_test.yaml").read_text())["tests"]
    tested = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check["exp_alerts"]  # a case that expects it to fire, not only silence
    }
    assert tested == {rule["alert"] for rule in rules()}


def markdown_anchors(text: str) -> set[str]:
    """The anchors of a Markdown file's headings, as the docs link to them (lower case, spaces to '-')."""
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_alert_has_a_runbook_in_the_operations_docs() -> None:
    anchors = markdown_anchors((REPO / "docs" / "operations.md").read_text())
    for rule in rules():
        url = rule["annotations"].get("runbook_url", "")
        page, _, anchor = url.partition("#")
        assert page == "docs/operations.md", f"{rule['alert']}: runbook_url {url!r}"
        assert anchor == rule["alert"].lower() and anchor in anchors, f"{rule['alert']}: no section #{anchor}"
