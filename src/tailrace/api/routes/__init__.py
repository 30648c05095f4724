"""The API's route groups, each a router mounted under /api/v1."""

from tailrace.api.routes import (
    auth,
    connections,
    dags,
    logs,
    runs,
    streams,
    task_instances,
    triggers,
)

__all__ = ["auth", "connections", "dags", "logs", "runs", "streams", "task_instances", "triggers"]
