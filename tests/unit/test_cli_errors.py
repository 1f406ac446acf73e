"""An operational error is one line naming what failed and where, with a documented exit code (never a
traceback); ``--debug`` shows the traceback. Each case runs the real CLI through click's CliRunner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from memsync.api.ids import id_problem
from memsync.cli import cli
from memsync.cli.failures import ExitCode, display_url, explain, store_exit_code
from memsync.client import errors

ADMIN_KEY = "sk-memsync-admin-test-key-never-printed"


def run(*argv: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(argv), env={"MEMSYNC_ADMIN_KEY": ADMIN_KEY, **(env or {})})
    assert ADMIN_KEY not in result.output
    return result


def one_error_line(result: Result) -> str:
    """The error, checked to be a single ``Error:`` line and no traceback."""
    assert "Traceback" not in result.output
    errors_shown = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors_shown) == 1, result.output
    return errors_shown[0]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Config
            clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
            users: [{{name: u, user: {{token: sk-kube-token-never-printed}}}}]
            contexts: [{{name: x, context: {{cluster: c, user: u, namespace: agents}}}}]
            current-context: x
            """
        )
    )
    return path


def test_status_against_an_unreachable_api_server_is_one_line_naming_it(tmp_path: Path) -> None:
    port = closed_port()
    result = run("status", "--kubeconfig", str(kubeconfig(tmp_path, f"https://127.0.0.1:{port}")))
    assert result.exit_code == ExitCode.UNREACHABLE
    line = one_error_line(result)
    assert f"cannot reach the Kubernetes API server at https://127.0.0.1:{port}" in line
    assert "namespace agents" in line and "Connection refused" in line
    assert "sk-kube-token" not in result.output


@pytest.mark.parametrize(
    "text",
    ["apiVersion: v1\nclusters: foo\ncontexts: 3\ncurrent-context: x\n", "just a string\n", "a: [unclosed\n"],
)
def test_a_malformed_kubeconfig_is_a_usage_error_naming_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "broken-config"
    path.write_text(text)
    for result in (run("status", "--kubeconfig", str(path)), run("status", env={"KUBECONFIG": str(path)})):
        assert result.exit_code == ExitCode.USAGE
        assert f"cannot use the kubeconfig {path}" in one_error_line(result)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    path = tmp_path / "broken-config"
    path.write_text("just a string\n")
    result = run("--debug", "status", "--kubeconfig", str(path))
    assert result.exit_code == ExitCode.USAGE
    assert "Traceback" in result.output and "TypeError" in result.output


def test_an_unexpected_error_is_one_line_and_debug_raises_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import memsync.cli.status_cluster

    def broken(*_: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(memsync.cli.status_cluster, "connect", broken)
    result = run("status")
    assert result.exit_code == ExitCode.FAILED
    assert "unexpected RuntimeError: boom (a bug: run with --debug" in one_error_line(result)
    debug = run("--debug", "status")
    assert isinstance(debug.exception, RuntimeError)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["store", "show", ""], "'STORE_ID': must not be empty"),
        (["store", "history", "memstore_1", " "], "'MEMORY': must not be empty"),
        (["store", "show", "sk-ant-api03-pasted-by-mistake"], "looks like a credential"),
        (["store", "redact", "memstore_1", "memver/../x"], "a '/' at position 7"),
        (["store", "list", "--url", "not-a-url"], "not an absolute http(s) URL"),
        (["store", "list", "--url", "http://user:hunter2@host:99999"], "the port is not a number"),
        (["store", "token", "--store", "memstore_1", "--session", "sk-ant-x"], "looks like a credential"),
    ],
)
def test_a_bad_argument_is_refused_before_any_request(argv: list[str], said: str) -> None:
    result = run(*argv)
    assert result.exit_code == ExitCode.USAGE, result.output
    assert said in one_error_line(result)
    for secret in ("sk-ant", "hunter2"):
        assert secret not in result.output


def test_an_unreachable_store_server_is_one_line_naming_it() -> None:
    port = closed_port()
    result = run("store", "list", "--url", f"http://127.0.0.1:{port}")
    assert result.exit_code == ExitCode.UNREACHABLE
    assert f"cannot reach the store server: GET http://127.0.0.1:{port}/v1/memory_stores?" in (
        one_error_line(result)
    )


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.NotFound(404, "not_found_error", "no such store"), ExitCode.NOT_FOUND),
        (errors.AuthenticationFailed(401, "authentication_error", "bad key"), ExitCode.UNAUTHORIZED),
        (errors.PermissionDenied(403, "permission_error", "read only"), ExitCode.UNAUTHORIZED),
        (errors.TransportError(message="refused"), ExitCode.UNREACHABLE),
        (errors.Conflict(409, "conflict_error", "exists"), ExitCode.CONFLICT),
        (errors.PreconditionFailed(409, "memory_precondition_failed_error", "changed"), ExitCode.CONFLICT),
        (errors.PathConflict(409, "memory_path_conflict_error", "taken"), ExitCode.CONFLICT),
        (errors.BadRequest(400, "invalid_request_error", "bad path"), ExitCode.USAGE),
        (errors.RequestTooLarge(413, "request_too_large", "too big"), ExitCode.USAGE),
        (errors.ServerError(503, "overloaded_error", "later"), ExitCode.FAILED),
        (errors.RateLimited(429, "rate_limit_error", "slow down"), ExitCode.FAILED),
        (errors.InvalidResponse(200, "invalid_response", "html"), ExitCode.FAILED),
    ],
)
def test_each_store_error_has_its_exit_code(error: errors.StoreError, code: ExitCode) -> None:
    assert store_exit_code(error) is code
    assert explain(error).exit_code == code


def test_explain_maps_files_and_connections_and_keeps_click_codes() -> None:
    missing = explain(FileNotFoundError(2, "No such file or directory", "/nope"))
    assert (missing.exit_code, missing.message) == (ExitCode.FAILED, "No such file or directory: /nope")
    assert explain(ConnectionRefusedError(111, "refused")).exit_code == ExitCode.UNREACHABLE
    assert explain(click.UsageError("wrong")).exit_code == ExitCode.USAGE


def test_exit_codes_are_distinct_and_documented() -> None:
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    table = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name.lower()}` |" in table


def test_ids_and_urls_are_shown_without_secrets() -> None:
    assert (
        display_url("https://user:pw@store.example:8443/base/?token=x") == "https://store.example:8443/base"
    )
    assert id_problem("memstore_01ABC-x") is None
    assert id_problem("SK-live-123") is not None


def test_the_operator_against_an_unreachable_api_server_exits_unreachable(tmp_path: Path) -> None:
    """A process of its own: the Kubernetes client reads KUBECONFIG when it is imported."""
    port = closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSYNC_", "KUBERNETES_"))}
    env["KUBECONFIG"] = str(kubeconfig(tmp_path, f"https://127.0.0.1:{port}"))
    done = subprocess.run(
        [sys.executable, "-m", "memsync", "operator", "--agent-image", "memsync:test", "-n", "agents"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == ExitCode.UNREACHABLE, done.stderr
    assert "Error: cannot read the Kubernetes API server's version" in done.stderr
    assert "Traceback" not in done.stderr and "sk-kube-token" not in done.stderr
