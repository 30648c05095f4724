"""An Airflow-style DAG file: pendulum dates, a time-zone cron schedule, a helper module
and a trigger module beside it, and an operator that starts in the triggerer."""

import pendulum

from common.naming import report_name
from my_triggers import ReadyTrigger
from tailrace import BaseOperator, StartTriggerArgs, dag, task


class WaitForExport(BaseOperator):
    """Starts in the triggerer and ends with the trigger's event: no execute() needed."""

    start_from_trigger = True
    start_trigger_args = StartTriggerArgs(
        trigger_cls="my_triggers.ReadyTrigger",
        trigger_kwargs={"name": "export"},
        timeout=pendulum.duration(minutes=5),
    )


class WaitThenReport(BaseOperator):
    def execute(self, context):
        self.defer(trigger=ReadyTrigger(name="report"), method_name="done")

    def done(self, context, event=None):
        return event


@dag(
    schedule="0 9 * * 1-5",  # 09:00 on weekdays, Amsterdam time, summer and winter
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Amsterdam"),
    tags=["airflow"],
)
def airflow_project():
    @task
    def name_report(logical_date=None):
        local = logical_date.in_timezone("Europe/Amsterdam")  # a pendulum DateTime
        return report_name(local.to_date_string())

    WaitForExport(task_id="wait_for_export") >> name_report() >> WaitThenReport(
        task_id="report"
    )


airflow_project()
