"""Task callbacks: a failure alert for every task, a note on retries, one on success."""

from datetime import datetime, timedelta

from tailrace import dag, task


def alert(context):
    ti = context["ti"]
    print(f"ALERT {ti.dag_id}.{ti.task_id} failed on try {ti.try_number}: {context['exception']}")


def note_retry(context):
    print(f"{context['ti'].task_id} will be retried: {context['exception']!r}")


def done(context):
    print(f"{context['ti'].task_id} succeeded")


@dag(
    schedule=None,
    start_date=datetime(2026, 1, 1),
    # Callbacks are task arguments: default_args gives them to every task.
    default_args={"on_failure_callback": alert, "on_retry_callback": note_retry},
    tags=["docs"],
)
def callbacks():
    @task(retries=1, retry_delay=timedelta(seconds=1), on_success_callback=[done])
    def flaky(ti=None) -> str:
        if ti.try_number == 1:
            raise ConnectionError("first try always fails")  # note_retry runs
        return "ok on try 2"  # done runs

    flaky()


callbacks()
