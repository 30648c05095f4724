"""A helper module beside the DAG files: DAG files import it as ``common.naming``."""


def report_name(day: str) -> str:
    return f"report-{day}.csv"
