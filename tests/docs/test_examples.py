"""Every DAG we show users runs: the bundled examples and the ones in docs/examples."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tailrace.config import EXAMPLE_DAGS_FOLDER
from tailrace.dagfiles import list_dag_files, load_dag_file
from tailrace.testing import DagHarness

DOCS_EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def dag_ids(folder: Path) -> list[str]:
    return sorted(d for f in list_dag_files(str(folder)) for d in load_dag_file(f).dags)


@pytest.fixture(params=[EXAMPLE_DAGS_FOLDER, DOCS_EXAMPLES], ids=["bundled", "docs"])
def examples(
    request: pytest.FixtureRequest, engine: Engine, tmp_path: Path
) -> Iterator[DagHarness]:
    with DagHarness(engine, request.param, log_folder=tmp_path / "logs") as h:
        yield h


@pytest.mark.parametrize("db_backend", ["sqlite"])
def test_every_example_dag_parses_cleanly_and_succeeds(examples: DagHarness) -> None:
    report = examples.parse()
    assert report.import_errors == 0
    expected = dag_ids(Path(examples.dags_folder))
    assert report.dags == len(expected) > 0
    runs = {dag_id: examples.trigger(dag_id) for dag_id in expected}
    failed = {
        dag_id: examples.summary(pk)
        for dag_id, pk in runs.items()
        if examples.run(pk, timeout=120)["state"] != "success"
    }
    assert failed == {}
