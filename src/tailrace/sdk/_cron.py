"""A cron expression read on the wall clock of a time zone, as Airflow's cron timetables
read it. In the SDK because task code asks it too (``LatestOnlyOperator``), and the
scheduler's schedules use the same class."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from croniter import croniter


class WallClockCron:
    """A cron expression on the wall clock of ``tz``."""

    def __init__(self, expression: str, tz: tzinfo) -> None:
        self.expression = expression
        self.tz = tz
        # croniter spells "every hour" as "*" in the hour field.
        self.hourly = croniter(expression).expanded[1] == ["*"]

    def _naive(self, moment: datetime) -> datetime:
        local = moment.astimezone(self.tz)
        return local.replace(tzinfo=None, fold=0)

    def _aware(self, naive: datetime) -> datetime:
        # fold=1: a repeated wall-clock time means its second occurrence; a skipped one
        # moves forward by the size of the gap (what Airflow's make_aware does).
        local = naive.replace(fold=1, tzinfo=self.tz)
        if local.utcoffset() != naive.replace(fold=0, tzinfo=self.tz).utcoffset():
            before = naive.replace(fold=0, tzinfo=self.tz).utcoffset()
            after = local.utcoffset()
            assert before is not None and after is not None
            if after > before:  # a gap: wall time skipped
                local = (naive + (after - before)).replace(tzinfo=self.tz)
        return local.astimezone(UTC)

    def next(self, moment: datetime) -> datetime:
        naive = self._naive(moment)
        scheduled: datetime = croniter(self.expression, naive).get_next(datetime)
        if not self.hourly:
            return self._aware(scheduled)
        return (moment + (scheduled - naive)).astimezone(UTC)

    def prev(self, moment: datetime) -> datetime:
        naive = self._naive(moment)
        scheduled: datetime = croniter(self.expression, naive).get_prev(datetime)
        if not self.hourly:
            return self._aware(scheduled)
        return (moment - (naive - scheduled)).astimezone(UTC)

    def at_or_after(self, moment: datetime) -> datetime:
        following = self.next(moment)
        return moment if self.prev(following) == moment else following

    def at_or_before(self, moment: datetime) -> datetime:
        previous = self.prev(moment)
        return moment if self.next(previous) == moment else previous
