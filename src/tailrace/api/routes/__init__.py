"""The API's route groups, each a router mounted under /api/v1."""

from fastapi import APIRouter

from tailrace.api.routes import (
    auth,
    connections,
    dags,
    logs,
    runs,
    streams,
    task_instances,
    triggers,
    ui,
    variables,
)

# Routers whose every route needs a token (auth's token route is the public one).
AUTHENTICATED: list[APIRouter] = [
    dags.router,
    runs.router,
    task_instances.router,
    logs.router,
    triggers.router,
    streams.router,
    connections.router,
    variables.router,
    ui.router,
]

__all__ = [
    "AUTHENTICATED",
    "auth",
    "connections",
    "dags",
    "logs",
    "runs",
    "streams",
    "task_instances",
    "triggers",
    "ui",
    "variables",
]
