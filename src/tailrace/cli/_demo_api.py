"""`tailrace demo-api`: a paginated JSON API to try the HTTP provider against."""

from __future__ import annotations

import sys

import typer

from tailrace.cli import app


@app.command("demo-api")
def demo_api(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8081, "--port", help="0 picks a free port."),
    page_size: int = typer.Option(10, "--page-size", min=1, help="Orders per page."),
    pages: int = typer.Option(5, "--pages", min=0, help="Pages of orders in all."),
    latency: float = typer.Option(0.0, "--latency", min=0.0, help="Seconds per response."),
    error_rate: float = typer.Option(
        0.0, "--error-rate", min=0.0, max=1.0, help="Share of responses that are a 429 or 500."
    ),
    retry_after: int = typer.Option(1, "--retry-after", min=0, help="Retry-After of a 429."),
    seed: int = typer.Option(0, "--seed", help="Seeds the injected errors."),
    token: str = typer.Option(None, "--token", help="Require 'Authorization: Bearer TOKEN'."),
) -> None:
    """Serve paginated orders (page, offset, Link header, cursor and OData styles)."""
    from tailrace.demo_api import DemoApiConfig, serve

    config = DemoApiConfig(
        page_size=page_size,
        pages=pages,
        latency=latency,
        error_rate=error_rate,
        retry_after=retry_after,
        seed=seed,
        token=token,
    )

    def listening(url: str) -> None:
        # Plain lines, flushed: scripts and tests wait for them.
        print(f"Demo API on {url} (Ctrl-C stops)", file=sys.stderr, flush=True)
        print(
            "  /orders, /orders/offset, /orders/link, /orders/cursor, /orders/odata, "
            "/eventually/KEY, /status/CODE, /stats",
            file=sys.stderr,
            flush=True,
        )

    serve(config, host, port, on_listening=listening)
