"""Human in the loop: an approval and a choice, each taking its default when nobody answers
within a second (so the docs' tests run it to the end unattended)."""

from datetime import datetime, timedelta

from tailrace import ApprovalOperator, EmptyOperator, HITLOperator, dag


@dag(schedule=None, start_date=datetime(2026, 1, 1), tags=["docs"])
def release():
    approve = ApprovalOperator(
        task_id="approve",
        subject="Release run {{ run_id }}?",
        body="The **staging** checks passed.",
        defaults="Approve",  # taken if nobody answers in time
        response_timeout=timedelta(seconds=1),
    )
    channel = HITLOperator(
        task_id="channel",
        subject="Which channel?",
        options=["stable", "beta"],
        defaults="beta",
        response_timeout=timedelta(seconds=1),
    )
    approve >> channel >> EmptyOperator(task_id="publish")


release()
