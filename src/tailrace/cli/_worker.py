"""`tailrace worker`: a Celery worker that runs tasks and reports to the execution API."""

from __future__ import annotations

import os

import typer

from tailrace.cli import app
from tailrace.cli._common import CliError, console, err_console, settings


@app.command()
def worker(
    queues: str = typer.Option(
        "default", "--queues", "-q", help="Comma-separated queues to take tasks from."
    ),
    concurrency: int = typer.Option(
        None, "--concurrency", "-c", min=1, help="Tasks at once (default: worker_processes)."
    ),
) -> None:
    """Run a Celery worker (executor = celery): tasks from the broker, no database needed.

    It reports to the api-server's execution API.
    """
    from tailrace.config import check_celery_settings, mask_url_password
    from tailrace.dagfiles import prepare_import_path

    try:
        from tailrace.executors.celery import celery_app
    except ImportError:
        raise CliError(
            "the Celery executor is not installed: pip install 'tailrace[celery]'"
        ) from None
    from tailrace import tracing

    s = settings()
    check_celery_settings(s, "worker")
    # Its pool processes set tracing up: refuse what they could not honour, here, once.
    tracing.wanted()
    prepare_import_path(s.dags_folder, s.plugins_folder)
    names = [q.strip() for q in queues.split(",") if q.strip()]
    if not names:
        raise CliError("--queues names no queue")
    processes = concurrency or s.worker_processes
    celery = celery_app(s)
    if s.executor != "celery":
        err_console.print(
            f"[yellow]Warning:[/] executor is {s.executor!r} here; schedulers send work to "
            "workers only with executor = celery (TAILRACE_EXECUTOR=celery)"
        )
    _check_api(s.execution_api)
    console.print(
        f"[bold]Tailrace worker[/] · queues {', '.join(names)} · {processes} processes · "
        f"broker {mask_url_password(s.celery_broker_url or '')} · "
        f"execution API {s.execution_api}",
        soft_wrap=True,
    )
    from tailrace.metrics import MetricsService, logs

    logs.configure(s.log_format, "worker")

    # Before the pool forks: its processes record into this directory too.
    worker_metrics = MetricsService(s, "worker")
    worker_metrics.start(transition_hook=False)
    if worker_metrics.port is not None:
        console.print(f"Metrics at http://{s.metrics_host}:{worker_metrics.port}/metrics")
    # A worker is its own program: Celery's log lines (tasks received, pool changes) show.
    # In JSON its lines go through ours instead, one object a line like every component's.
    celery.conf.worker_hijack_root_logger = s.log_format != "json"
    from celery.signals import worker_ready

    @worker_ready.connect  # type: ignore[untyped-decorator]
    def _ready(**_: object) -> None:
        console.print(f"Worker ready: taking tasks from {', '.join(names)}. Ctrl-C stops.")

    try:
        celery.worker_main(
            [
                "worker",
                f"--queues={','.join(names)}",
                f"--concurrency={processes}",
                "--pool=prefork",
                "--loglevel=INFO",
                f"--hostname=tailrace-{os.getpid()}@%h",
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        worker_metrics.stop()


def _check_api(url: str) -> None:
    """Say so at once when the execution API is unreachable (tasks would wait for it)."""
    import httpx

    try:
        httpx.get(f"{url}/execution/v1/health", timeout=5.0).raise_for_status()
    except httpx.HTTPError as exc:
        err_console.print(
            f"[yellow]Warning:[/] the execution API at {url} does not answer ({exc}); tasks "
            "will wait for it. Set execution_api_url (TAILRACE_EXECUTION_API_URL) to the "
            "api-server's address."
        )
