"""The API's route groups, each a router mounted under /api/v1 (backfills and
hitlDetails also under /api/v2, Airflow 3's prefix, for Airflow clients)."""

from fastapi import APIRouter

from tailrace.api.routes import (
    assets,
    auth,
    backfills,
    connections,
    dags,
    hitl,
    logs,
    pools,
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
    backfills.router,
    hitl.router,
    task_instances.router,
    logs.router,
    triggers.router,
    streams.router,
    connections.router,
    assets.router,
    pools.router,
    variables.router,
    ui.router,
]

__all__ = [
    "AUTHENTICATED",
    "assets",
    "auth",
    "backfills",
    "connections",
    "dags",
    "hitl",
    "logs",
    "pools",
    "runs",
    "streams",
    "task_instances",
    "triggers",
    "ui",
    "variables",
]
