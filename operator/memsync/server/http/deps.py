"""What the store server's routes take from a request besides their path: the caller, the body and the
shared query parameters.

A caller is authenticated once per request: ``Caller`` for the memory store API (an admin key or a sessions
token), ``EnvironmentCaller`` for the environment extension (which also takes environment keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from memsync.server.access import AccessService, Principal
from memsync.server.bodies import validate_id
from memsync.server.environments.service import Caller as EnvCaller
from memsync.server.environments.service import EnvironmentService
from memsync.server.errors import invalid
from memsync.server.http.envelope import read_body

# Credentials are the document's security schemes (``openapi.SECURITY_SCHEMES``), not parameters.
XApiKey = Annotated[str | None, Header(alias="x-api-key", include_in_schema=False)]
Authorization = Annotated[str | None, Header(alias="authorization", include_in_schema=False)]


async def authenticate(
    request: Request, x_api_key: XApiKey = None, authorization: Authorization = None
) -> Principal:
    """The caller, from ``x-api-key`` (an admin key) or ``Authorization: Bearer`` (an admin key or a sessions
    token); 401 otherwise. A cached answer is used on the event loop; the database is asked in the
    threadpool."""
    access: AccessService = request.app.state.access
    cached = access.cached(x_api_key, authorization)
    if cached is not None:
        return cached
    return await run_in_threadpool(access.authenticate, x_api_key, authorization)


def authenticate_environment_caller(
    request: Request, x_api_key: XApiKey = None, authorization: Authorization = None
) -> EnvCaller:
    """The caller of an environment endpoint: an admin key, an environment key or a sessions token."""
    envs: EnvironmentService = request.app.state.environments
    return envs.authenticate(x_api_key, authorization)


async def ids_in_path(request: Request) -> None:
    """Every id in the request's path (``store_id``, ``memory_id``...) by the id rule, before anything is
    looked up: a 400 naming the parameter (``bodies.validate_id``). On the event loop: it does no I/O."""
    for name, value in request.path_params.items():
        validate_id(value, name)


async def one_value_per_query_parameter(request: Request) -> None:
    """Every query parameter of this API is one value: one given twice (``?beta=a&beta=b``) is a 400 naming
    it, not the last value taken silently (what the document promises: a schema-violating request is
    refused)."""
    names = [name for name, _ in request.query_params.multi_items()]
    if len(names) != len(set(names)):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise invalid(f"query parameter {', '.join(repeated)} given more than once; give each once")


Body = Annotated[bytes, Depends(read_body)]
Caller = Annotated[Principal, Depends(authenticate)]
EnvironmentCaller = Annotated[EnvCaller, Depends(authenticate_environment_caller)]
ViewQuery = Annotated[str | None, Query()]
Limit = Annotated[int | None, Query()]
Page = Annotated[str | None, Query()]
Beta = Annotated[str | None, Query(alias="beta")]  # ``?beta=true``: accepted and ignored
CreatedGte = Annotated[str | None, Query(alias="created_at[gte]")]
CreatedLte = Annotated[str | None, Query(alias="created_at[lte]")]


@dataclass(frozen=True)
class Paging:
    """The query parameters every listing takes: how much of each item, how many, and from where."""

    view: str | None
    limit: int | None
    page: str | None


def paging(view: ViewQuery = None, limit: Limit = None, page: Page = None) -> Paging:
    return Paging(view, limit, page)


PagingQuery = Annotated[Paging, Depends(paging)]
