"""How the CLI fails: one line on stderr naming what failed and where, and an exit code a script can test.

Exit codes (docs/cli.md#errors-and-exit-codes)::

    0  done
    1  failed (the server failed, an unexpected error; anything below does not fit)
    2  usage: a wrong argument, option or configuration (also a request the server refused as invalid)
    3  not found
    4  unauthorized: the credential was refused (401) or lacks the permission (403)
    5  unreachable: no answer (connection refused, a name that does not resolve, a timeout, TLS)
    6  conflict: someone else changed it first, or it already exists (409)
    7  partial: the command did part of its work; what it left is listed on stderr
  130  interrupted: Ctrl-C (SIGINT) stopped a long command; what it had done is said on stderr
  143  terminated: SIGTERM stopped it (the shell's 128 + the signal's number, as for 130)

The sync agent's own commands (``mount``, ``sync``, ``flush``) keep their documented codes (0, 1, 2).
An error that is not operational (a bug) is one line too, naming its type; ``--debug`` shows the traceback.
Nothing here imports more than click: the modules of an error are already loaded when it is mapped.
"""

from __future__ import annotations

import signal
import sys
from enum import IntEnum
from urllib.parse import urlsplit

import click


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    NOT_FOUND = 3
    UNAUTHORIZED = 4
    UNREACHABLE = 5
    CONFLICT = 6
    PARTIAL = 7
    INTERRUPTED = 130
    TERMINATED = 143


def interrupted(sig: signal.Signals, done: str = "") -> click.exceptions.Exit:
    """Say that ``sig`` stopped the command (and what it had ``done``), and exit 130 or 143: never click's
    ``Aborted!``."""
    code = ExitCode.TERMINATED if sig == signal.SIGTERM else ExitCode.INTERRUPTED
    click.echo(f"interrupted by {sig.name}" + (f": {done}" if done else ""), err=True)
    return click.exceptions.Exit(int(code))


class CliError(click.ClickException):
    """A one-line ``Error: ...`` on stderr and the given exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = int(code)  # type: ignore[misc]  # click reads it per instance too


def display_url(url: str) -> str:
    """``scheme://host[:port][/path]`` of ``url``, never its userinfo or query (they may hold a secret)."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path.rstrip('/')}"


def store_exit_code(exc: BaseException) -> ExitCode:
    """The exit code of a store client error (``memsync.client.errors``), by its class."""
    from memsync.client import errors  # noqa: PLC0415 (loaded already whenever it raised)

    table: tuple[tuple[type[errors.StoreError], ExitCode], ...] = (
        (errors.NotFound, ExitCode.NOT_FOUND),
        (errors.AuthenticationFailed, ExitCode.UNAUTHORIZED),
        (errors.PermissionDenied, ExitCode.UNAUTHORIZED),
        (errors.TransportError, ExitCode.UNREACHABLE),
        (errors.Conflict, ExitCode.CONFLICT),
        (errors.BadRequest, ExitCode.USAGE),
        (errors.RequestTooLarge, ExitCode.USAGE),
    )
    return next((code for cls, code in table if isinstance(exc, cls)), ExitCode.FAILED)


def store_failure(exc: BaseException, url: str, about: str | None = None) -> CliError:
    """A store client error as one line: the argument it is about (if any), the server, what it said."""
    code = store_exit_code(exc)
    where = display_url(url)
    if code is ExitCode.UNREACHABLE:
        detail = str(getattr(exc, "message", "") or exc)
        # The client's transport error already names the request's full URL; the server is named once.
        text = (
            f"cannot reach the store server: {detail}"
            if where in detail
            else (f"cannot reach the store server at {where}: {detail}")
        )
    else:
        text = f"{exc} (store server {where})"
    return CliError(f"{about}: {text}" if about else text, code)


def kube_exit_code(status: int) -> ExitCode:
    """The exit code of a Kubernetes API status."""
    if status in (401, 403):
        return ExitCode.UNAUTHORIZED
    if status == 404:
        return ExitCode.NOT_FOUND
    if status == 409:
        return ExitCode.CONFLICT
    if status in (400, 422):
        return ExitCode.USAGE
    return ExitCode.FAILED


def _unreachable(exc: BaseException) -> str | None:
    """What went wrong, when ``exc`` means that nothing answered; else None."""
    urllib3 = sys.modules.get("urllib3.exceptions")
    if urllib3 is not None and isinstance(exc, urllib3.HTTPError):
        reason = getattr(exc, "reason", None) or exc
        text = str(reason)
        # urllib3 prefixes its connection object's repr: "HTTPSConnection(host=..., port=...): why"
        return text.split("): ", 1)[1] if "): " in text else text
    if isinstance(exc, ConnectionError | TimeoutError):
        return str(exc)
    return None


def explain(exc: Exception) -> CliError:
    """Any exception a command let through, as one line and an exit code (the root command calls this)."""
    if isinstance(exc, click.ClickException):
        return CliError(exc.format_message(), ExitCode(exc.exit_code))
    client_errors = sys.modules.get("memsync.client.errors")
    if client_errors is not None and isinstance(exc, client_errors.StoreError):
        return CliError(str(exc), store_exit_code(exc))
    if (why := _unreachable(exc)) is not None:
        return CliError(f"no answer: {why}", ExitCode.UNREACHABLE)
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return CliError(f"{exc.strerror or exc}{where}", ExitCode.FAILED)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return CliError(
        f"unexpected {type(exc).__name__}{': ' + text if text else ''} (a bug: run with --debug for the "
        "traceback and report it)",
        ExitCode.FAILED,
    )
