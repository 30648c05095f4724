"""A DAG's run, controlled as in Airflow: callbacks when the run ends, a run timeout, a
task that waits for its previous run, priorities, and a pool of connections."""

from datetime import datetime, timedelta

from tailrace import dag, task


def run_finished(context):
    # Runs in a worker (never the scheduler) with the run's context.
    print(f"run {context['run_id']} of {context['dag'].dag_id} ended: {context['reason']}")


def run_failed(context):
    # reason is "task_failure", or "timed_out" when dagrun_timeout ended the run.
    print(f"ALERT run {context['run_id']} failed: {context['reason']}")


@dag(
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    dagrun_timeout=timedelta(hours=2),
    on_success_callback=run_finished,
    on_failure_callback=[run_failed],
    tags=["docs"],
)
def run_control():
    @task(depends_on_past=True)
    def load_increment():
        # Waits until yesterday's load_increment succeeded (or was skipped).
        return "loaded"

    @task(pool="default_pool", pool_slots=2, priority_weight=10, weight_rule="absolute")
    def heavy_query():
        # Takes two slots of its pool; goes before lighter tasks when slots are short.
        return 42

    @task
    def report(loaded, rows):
        return f"{loaded}: {rows} rows"

    report(load_increment(), heavy_query())


run_control()
