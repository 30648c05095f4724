"""Connections and the HTTP hook, against a tiny API this DAG serves itself."""

import asyncio
import json
import os
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tailrace import dag, task
from tailrace.providers.http import HttpHook
from tailrace.sdk.connections import get_connection

# As `tailrace connections add warehouse --uri ...` would (nothing connects to it here).
os.environ.setdefault("TAILRACE_CONN_WAREHOUSE", "postgresql://etl:s3cret@db.internal/warehouse")


class Orders(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "items": [{"id": 1}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def connections():
    @task
    def read_connection() -> str:
        conn = get_connection("warehouse")
        conn.conn_type, conn.host, conn.port, conn.login, conn.schema, conn.extra  # parsed parts
        conn.uri          # the full URI, password included
        conn.masked_uri   # postgresql://etl:***@db.internal/warehouse
        return conn.masked_uri

    @task
    def call_api() -> int:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Orders)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        os.environ["TAILRACE_CONN_ORDERS_API"] = f"http://127.0.0.1:{server.server_port}"
        try:
            hook = HttpHook("orders_api", timeout=30, max_retries=5, retry_backoff=0.5)
            response = hook.run("/orders", params={"page": 1})            # blocking, in a task

            async def in_a_trigger() -> None:
                response = await hook.arun("/orders", params={"page": 1})     # in a trigger
                async with hook.async_client() as client:                      # pooled, for many calls
                    for page in range(3):
                        await hook.arun("/orders", client=client, params={"page": page})
                response.raise_for_status()

            asyncio.run(in_a_trigger())
            return response.status_code
        finally:
            server.shutdown()

    read_connection()
    call_api()


connections()
