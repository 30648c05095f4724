from __future__ import annotations

import threading
from dataclasses import dataclass, field

from fastapi import Request
from sqlalchemy import Engine

from tailrace.api._throttle import LoginThrottle
from tailrace.api._tokens import TokenCache
from tailrace.config import Settings
from tailrace.connections import FernetKeys
from tailrace.db import read_only_engine
from tailrace.notify import Wakeups
from tailrace.tracing.timeline import install_timeline


@dataclass
class ApiContext:
    """What every request handler needs: settings, the database, and wake-ups to send."""

    settings: Settings
    engine: Engine
    wakeups: Wakeups
    readonly: Engine = field(init=False)
    # Set when the server stops: live (event-stream) responses end instead of holding it up.
    closing: threading.Event = field(init=False, default_factory=threading.Event)
    login_throttle: LoginThrottle = field(init=False)
    fernet: FernetKeys = field(init=False)
    tokens: TokenCache = field(init=False, default_factory=TokenCache)

    def __post_init__(self) -> None:
        self.readonly = read_only_engine(self.engine)
        # Remote workers' reports, clears and marks change state here: the run timeline
        # records them.
        install_timeline()
        self.fernet = FernetKeys.from_settings(self.settings)
        self.login_throttle = LoginThrottle(
            self.settings.auth_rate_limit_attempts, self.settings.auth_rate_limit_seconds
        )


def app_context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.tailrace
    return ctx


async def context(request: Request) -> ApiContext:
    """The dependency: async, as a plain function would be run on the thread pool."""
    return app_context(request)
