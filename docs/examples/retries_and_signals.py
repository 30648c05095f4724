"""Retries, timeouts and the SkipTask / FailTask signals."""

from datetime import datetime, timedelta

from tailrace import FailTask, SkipTask, dag, task


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def retries_and_signals():
    @task(retries=2, retry_delay=timedelta(seconds=1))
    def flaky(ti=None) -> str:
        if ti.try_number == 1:
            raise ConnectionError("first try always fails")
        return f"ok on try {ti.try_number}"

    @task(execution_timeout=timedelta(seconds=30))
    def bounded() -> None:
        pass  # raises TaskExecutionTimeout if it runs longer than 30s

    @task
    def maybe(files: list[str]) -> None:
        if not files:
            raise SkipTask("nothing arrived today")  # state: skipped

    @task(retries=5)
    def strict(config: dict) -> None:
        if "token" not in config:
            raise FailTask("no token configured; retrying will not help")  # no retries

    @task(trigger_rule="all_done")
    def cleanup() -> None:
        print("runs whatever happened upstream")

    flaky() >> bounded()
    [maybe([]), strict({})] >> cleanup()


retries_and_signals()
