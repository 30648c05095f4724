"""The API served over real HTTP on loopback, against a real database, with users."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from tailrace.api import ApiContext, ApiServer
from tailrace.clock import utcnow
from tailrace.config import Settings, load_settings
from tailrace.dag_processing import ParseOptions
from tailrace.notify import Wakeups
from tailrace.testing import DagHarness
from tailrace.users import create_user, issue_token

DAGS = {
    "api_basic.py": """
        from datetime import datetime
        from tailrace import Asset, Param, dag, task

        @dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["api"],
             params={"greeting": Param("hello", type="string")})
        def api_basic():
            @task
            def one(**context):
                print("greeting is", context["params"]["greeting"])
                return 1

            @task(outlets=[Asset("api_basic_out")])
            def two(x):
                return x + 1

            two(one())

        api_basic()
    """,
    "api_mapped.py": """
        from datetime import datetime
        from tailrace import dag, task

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def api_mapped():
            @task
            def numbers():
                return list(range(7))

            @task
            def double(n):
                return n * 2

            double.expand(n=numbers())

        api_mapped()
    """,
    "api_stream.py": """
        import asyncio
        from datetime import datetime
        from tailrace import BaseOperator, BaseTrigger, StartTriggerArgs, TriggerEvent, dag

        class Pages(BaseTrigger):
            def __init__(self, pages=12):
                super().__init__()
                self.pages = pages

            def serialize(self):
                return (f"{type(self).__module__}.Pages", {"pages": self.pages})

            async def run(self):
                for page in range(self.pages):
                    self.log.info("trigger fetched page %d", page)
                    yield TriggerEvent({"page": page})

        class FetchPages(BaseOperator):
            start_from_trigger = True
            start_trigger_args = StartTriggerArgs(
                trigger_cls=f"{__name__}.Pages", trigger_kwargs={"pages": 12}
            )

            def execute(self, context):
                raise RuntimeError("never runs")

        @dag(schedule=None, start_date=datetime(2026, 1, 1))
        def api_stream():
            FetchPages(task_id="fetch")

        api_stream()
    """,
    "api_live.py": """
        import os
        import time
        from datetime import datetime
        from tailrace import dag, task

        @dag(schedule=None, start_date=datetime(2026, 1, 1), params={"gate": ""})
        def api_live():
            @task
            def gated(**context):
                print("before the gate")
                # The test opens the gate once it has read the line above from a followed log.
                while not os.path.exists(context["params"]["gate"]):
                    time.sleep(0.01)
                print("after the gate")

            gated()

        api_live()
    """,
    "api_broken.py": "from tailrace import dag\nraise ValueError('broken on purpose')\n",
}


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name, source in DAGS.items():
        (folder / name).write_text(textwrap.dedent(source))
    return folder


@pytest.fixture
def settings(database_url: str, tailrace_home: Path, dags_folder: Path) -> Settings:
    return load_settings(
        {
            "TAILRACE_HOME": str(tailrace_home),
            "TAILRACE_DATABASE_URL": database_url,
            "TAILRACE_DAGS_FOLDER": str(dags_folder),
            # The execution API (remote workers' reports) is on only with a secret key.
            "TAILRACE_SECRET_KEY": EXECUTION_SECRET,
            # The tests pause and unpause DAGs themselves, from unpaused.
            "TAILRACE_DAGS_ARE_PAUSED_AT_CREATION": "false",
        }
    )


@pytest.fixture
def harness(engine: Engine, settings: Settings) -> Iterator[DagHarness]:
    """A real scheduler, workers and triggerer on the API's database and log folder; it
    hears the API's wake-ups as a standalone scheduler would."""
    with DagHarness(
        engine,
        settings.dags_folder,
        log_folder=settings.log_folder,
        parse_options=ParseOptions.from_settings(settings),
    ) as h:
        h.parse()
        wakeups = Wakeups(settings.home, engine)
        wakeups.listen("scheduler", h.scheduler.wake)
        try:
            yield h
        finally:
            wakeups.close()


@dataclass
class Api:
    url: str
    admin: httpx.Client
    viewer: httpx.Client
    anonymous: httpx.Client
    server: ApiServer


PASSWORDS = {"ada": "ada-secret-pw", "vic": "vic-secret-pw"}
EXECUTION_SECRET = "execution-api-test-secret-of-enough-length"


@pytest.fixture
def api(engine: Engine, settings: Settings) -> Iterator[Api]:
    ctx = ApiContext(settings, engine, Wakeups(settings.home, engine))
    server = ApiServer(ctx, "127.0.0.1", 0)
    server.start()
    now = utcnow()
    with engine.begin() as conn:
        tokens = [
            issue_token(conn, create_user(conn, name, PASSWORDS[name], role, now), now)[0]
            for name, role in (("ada", "admin"), ("vic", "viewer"))
        ]
    base = f"{server.url}/api/v1"

    def client(token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=base, headers=headers, timeout=30)

    clients = [*(client(token) for token in tokens), client(None)]
    try:
        yield Api(base, *clients, server=server)
    finally:
        for c in clients:
            c.close()
        server.stop()
        ctx.wakeups.close()
