"""The execution API over real HTTP, driven by the remote worker's own channel.

A try is put in the state a scheduler leaves it in (queued, with a try number) and then
reported on exactly as a Celery worker does; the database is read to see what landed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import jwt
import pytest
from sqlalchemy import Engine, insert, select, update

from tailrace.api import ApiContext, ApiServer
from tailrace.config import Settings, load_settings
from tailrace.connections import add_connection
from tailrace.db.models import DagCallback, Stream, StreamItem, TaskInstance, XCom
from tailrace.execution import GetXCom, TaskFinished, TaskStarted
from tailrace.execution._logs import log_path_for
from tailrace.execution._remote import (
    OWED_BYTES,
    ExecutionApiChannel,
    ExecutionApiError,
    TryNotCurrentError,
    _Batch,
    _Companion,
    _Relay,
)
from tailrace.execution.protocol import (
    LOG_BYTES_HEADER,
    MAX_POSTS,
    ConnectionReply,
    DagCallbackFinished,
    GetConnection,
    Post,
    StreamItems,
    XComReply,
    XComValue,
    decode_post_replies,
    decode_to_worker,
    encode,
    encode_posts,
)
from tailrace.execution.tokens import (
    AUDIENCE,
    InvalidTaskTokenError,
    issue_callback_token,
    issue_task_token,
    verify_task_token,
)
from tailrace.notify import Wakeups
from tailrace.testing import DagHarness, wait_for

from .conftest import EXECUTION_SECRET as SECRET


@dataclass
class Remote:
    url: str
    engine: Engine
    settings: Settings
    run_id: int
    other_run_id: int
    changed_runs: list[set[int]]
    changed: threading.Event
    channels: list[ExecutionApiChannel] = field(default_factory=list)

    def queue(self, task_id: str, try_number: int = 1, run_id: int | None = None) -> int:
        """Put the task's instance where a scheduler leaves it: queued for this try."""
        with self.engine.begin() as conn:
            ti_id: int = conn.execute(
                update(TaskInstance)
                .where(
                    TaskInstance.dag_run_id == (run_id or self.run_id),
                    TaskInstance.task_id == task_id,
                )
                .values(state="queued", try_number=try_number, queued_at=datetime.now(UTC))
                .returning(TaskInstance.id)
            ).scalar_one()
        return ti_id

    def channel(self, ti_id: int, try_number: int = 1) -> ExecutionApiChannel:
        token = issue_task_token(SECRET, ti_id, try_number)
        channel = ExecutionApiChannel(self.url, ti_id, token, retries=0)
        self.channels.append(channel)
        return channel

    def ti(self, ti_id: int) -> TaskInstance:
        with self.engine.connect() as conn:
            return conn.execute(select(TaskInstance).where(TaskInstance.id == ti_id)).one()


@pytest.fixture
def remote(harness: DagHarness, engine: Engine, settings: Settings) -> Iterator[Remote]:
    run_id = harness.trigger("api_basic")
    other_run_id = harness.trigger("api_basic")
    ctx = ApiContext(settings, engine, Wakeups(settings.home, engine))
    server = ApiServer(ctx, "127.0.0.1", 0)
    server.start()
    # What a scheduler hears: the runs a report changed.
    changed_runs: list[set[int]] = []
    changed = threading.Event()
    listener = Wakeups(settings.home, engine)

    def on_runs(ids: set[int]) -> None:
        changed_runs.append(ids)
        changed.set()

    listener.listen_for_runs(on_runs)
    remote = Remote(server.url, engine, settings, run_id, other_run_id, changed_runs, changed)
    try:
        yield remote
    finally:
        for channel in remote.channels:
            channel.close()
        listener.close()
        server.stop()
        ctx.wakeups.close()


def _started(ti_id: int, try_number: int = 1, pid: int = 4242) -> TaskStarted:
    return TaskStarted(
        ti_id=ti_id, try_number=try_number, pid=pid, hostname="far-away", start_date=_now()
    )


def _finished(ti_id: int, try_number: int = 1, **fields: object) -> TaskFinished:
    report = {"outcome": "success", "start_date": _now(), "end_date": _now(), **fields}
    return TaskFinished(ti_id=ti_id, try_number=try_number, **report)  # type: ignore[arg-type]


def _now() -> datetime:
    return datetime.now(UTC)


def test_a_try_reports_start_heartbeat_xcom_reads_and_its_result(remote: Remote) -> None:
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)

    channel.send_bytes(encode(_started(ti_id)))
    started = remote.ti(ti_id)
    assert (started.state, started.hostname, started.pid) == ("running", "far-away", 4242)
    assert started.last_heartbeat_at is not None
    channel.heartbeat()

    channel.send_bytes(encode(_finished(ti_id, xcoms=[XComValue("return_value", "1")])))
    assert remote.ti(ti_id).state == "success"
    assert remote.changed.wait(10), "the schedulers were not told the run changed"
    assert remote.run_id in set().union(*remote.changed_runs)

    # The downstream try reads the upstream's XCom through the same API.
    downstream = remote.queue("two")
    reader = remote.channel(downstream)
    reader.send_bytes(
        encode(GetXCom(dag_run_id=remote.run_id, task_ids=["one"], key="return_value"))
    )
    reply = decode_to_worker(reader.recv_bytes())
    assert isinstance(reply, XComReply)
    assert [(r.task_id, r.value) for r in reply.rows] == [("one", "1")]
    with remote.engine.connect() as conn:
        assert conn.scalar(select(XCom.value).where(XCom.task_id == "one")) == "1"


def test_requests_without_a_valid_token_for_that_try_are_refused(remote: Remote) -> None:
    ti_id = remote.queue("one")
    other_ti = remote.queue("two")
    url = f"{remote.url}/execution/v1/task-instances/{ti_id}/messages"
    body = encode(_started(ti_id))

    def post(token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(url, content=body, headers=headers)

    assert post(None).status_code == 401
    assert post("not-a-token").status_code == 401
    assert (
        post(issue_task_token("another deployment's secret key, long enough", ti_id, 1)).status_code
        == 401
    )
    wrong_ti = post(issue_task_token(SECRET, other_ti, 1))
    assert wrong_ti.status_code == 403
    assert f"for task instance {other_ti}, not {ti_id}" in wrong_ti.json()["error"]["message"]
    # A token for try 2 cannot report for try 1.
    assert post(issue_task_token(SECRET, ti_id, 2)).status_code == 403
    assert remote.ti(ti_id).state == "queued"
    assert post(issue_task_token(SECRET, ti_id, 1)).status_code == 204


def test_a_try_that_is_no_longer_current_is_told_to_stop(remote: Remote) -> None:
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    channel.send_bytes(encode(_started(ti_id)))
    # The same start again (its answer was lost) is fine; another worker's start is not.
    channel.send_bytes(encode(_started(ti_id)))
    with pytest.raises(TryNotCurrentError, match="no longer current"):
        channel.send_bytes(encode(_started(ti_id, pid=999)))

    # A user clears the instance while it runs: the next heartbeat says stop.
    with remote.engine.begin() as conn:
        conn.execute(update(TaskInstance).where(TaskInstance.id == ti_id).values(state=None))
    with pytest.raises(TryNotCurrentError, match=r"try 1 of api_basic\.one is no longer current"):
        channel.heartbeat()
    with pytest.raises(TryNotCurrentError):
        channel.send_bytes(encode(_finished(ti_id)))
    assert remote.ti(ti_id).state is None


def test_a_token_reads_nothing_once_its_try_is_over(remote: Remote) -> None:
    add_connection(remote.engine, "warehouse", "postgresql://u:hunter2@db/x")
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    channel.send_bytes(encode(_started(ti_id)))
    channel.send_bytes(encode(GetConnection(conn_id="warehouse")))
    reply = decode_to_worker(channel.recv_bytes())
    assert isinstance(reply, ConnectionReply) and reply.uri is not None
    assert "hunter2" in reply.uri
    channel.send_bytes(encode(_finished(ti_id)))
    # The finished try's token is unexpired, but its grant ended with the try.
    with pytest.raises(TryNotCurrentError, match="no longer current"):
        channel.send_bytes(encode(GetConnection(conn_id="warehouse")))
    with pytest.raises(TryNotCurrentError):
        channel.send_bytes(encode(GetXCom(dag_run_id=remote.run_id, task_ids=["one"], key="x")))
    # A superseded try: the instance moved on to try 2.
    remote.queue("one", try_number=2)
    with pytest.raises(TryNotCurrentError, match="at try 2"):
        channel.send_bytes(encode(GetConnection(conn_id="warehouse")))


def test_a_remote_task_reads_writes_and_deletes_variables_while_its_try_is_current(
    remote: Remote,
) -> None:
    from tailrace.execution._worker import OwnerVariables
    from tailrace.variables import find_variable, set_variable

    set_variable(remote.engine, "region", "eu-west-1")
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    channel.send_bytes(encode(_started(ti_id)))
    variables = OwnerVariables(channel)
    assert variables.get("region") == "eu-west-1"
    assert variables.get("nope") is None
    variables.set("written", '{"n": 1}', "from a task")
    stored = find_variable(remote.engine, "written")
    assert stored is not None and stored.value == '{"n": 1}' and stored.description == "from a task"
    assert variables.delete("region") is True and variables.delete("region") is False
    channel.send_bytes(encode(_finished(ti_id)))
    with pytest.raises(TryNotCurrentError, match="no longer current"):
        variables.set("late", "x", None)
    assert find_variable(remote.engine, "late") is None


def test_a_task_token_expires_with_the_lifetime_it_was_given() -> None:
    token = issue_task_token(SECRET, 7, 1, now=1_000_000, lifetime=90)
    claims = jwt.decode(
        token, SECRET, algorithms=["HS256"], audience=AUDIENCE, options={"verify_exp": False}
    )
    assert claims["exp"] - claims["iat"] == 90


def test_a_task_token_checked_once_is_still_refused_once_it_expires() -> None:
    # Its signature is checked once and remembered; its expiry, at every use.
    token = issue_task_token(SECRET, 7, 1, lifetime=60)
    assert verify_task_token(SECRET, token) == (7, 1)
    assert verify_task_token(SECRET, token, now=time.time() + 30) == (7, 1)
    with pytest.raises(InvalidTaskTokenError, match="expired"):
        verify_task_token(SECRET, token, now=time.time() + 61)
    # A token signed with another key is refused every time, never remembered as valid.
    forged = issue_task_token("another deployment's secret key, long enough", 7, 1)
    for _ in range(2):
        with pytest.raises(InvalidTaskTokenError, match="Signature verification failed"):
            verify_task_token(SECRET, forged)


def test_reports_that_arrive_together_commit_together(remote: Remote) -> None:
    from sqlalchemy import event

    from tailrace.api.execution import _GroupCommit

    ctx = ApiContext(remote.settings, remote.engine, Wakeups(remote.settings.home, remote.engine))
    tis = [
        remote.queue(task_id, run_id=run)
        for task_id in ("one", "two")
        for run in (remote.run_id, remote.other_run_id)
    ]
    with remote.engine.begin() as conn:
        conn.execute(update(TaskInstance).where(TaskInstance.id.in_(tis)).values(state="running"))
    stale = _finished(tis[0], try_number=7)
    group = _GroupCommit(ctx)
    commits: list[int] = []
    event.listen(remote.engine, "commit", lambda conn: commits.append(1))
    verdicts: dict[int, bool] = {}

    def report(message: TaskFinished) -> None:
        verdicts[message.try_number * 1000 + message.ti_id] = group.apply(message)

    # A commit is under way: the reports arriving meanwhile wait, then commit as one.
    with group._commit:
        threads = [
            threading.Thread(target=report, args=(m,))
            for m in [*(_finished(t) for t in tis), stale]
        ]
        for t in threads:
            t.start()
        wait_for(lambda: group.waiting() == 5 or None, timeout=10)
    for t in threads:
        t.join(10)
    assert commits == [1]
    assert verdicts == {1000 + t: True for t in tis} | {7000 + tis[0]: False}
    assert {remote.ti(t).state for t in tis} == {"success"}
    ctx.wakeups.close()


def test_a_report_that_cannot_be_applied_fails_alone(remote: Remote) -> None:
    from tailrace.api.execution import _GroupCommit

    ctx = ApiContext(remote.settings, remote.engine, Wakeups(remote.settings.home, remote.engine))
    good, bad = remote.queue("one"), remote.queue("two")
    group = _GroupCommit(ctx)
    # An XCom row the database refuses (its key is NOT NULL) poisons its transaction.
    poison = _finished(bad, xcoms=[XComValue(None, "1")])  # type: ignore[arg-type]
    results: dict[str, object] = {}

    def report(name: str, message: TaskFinished) -> None:
        try:
            results[name] = group.apply(message)
        except Exception as exc:
            results[name] = exc

    with group._commit:
        threads = [
            threading.Thread(target=report, args=("good", _finished(good))),
            threading.Thread(target=report, args=("bad", poison)),
        ]
        for t in threads:
            t.start()
        wait_for(lambda: group.waiting() == 2 or None, timeout=10)
    for t in threads:
        t.join(10)
    assert results["good"] is True
    assert isinstance(results["bad"], Exception)
    assert remote.ti(good).state == "success"
    assert remote.ti(bad).state == "queued"
    ctx.wakeups.close()


def test_reports_waiting_for_their_commit_hold_no_request_thread(
    harness: DagHarness, engine: Engine, settings: Settings
) -> None:
    """Starts and results wait for the committer, not on the api-server's handler
    threads: while a commit is under way, more report requests than there are threads
    wait, and a request that needs a thread (a heartbeat) is still answered."""
    import dataclasses

    runs = [harness.trigger("api_basic") for _ in range(2)]
    ctx = ApiContext(
        dataclasses.replace(settings, api_threads=2), engine, Wakeups(settings.home, engine)
    )
    server = ApiServer(ctx, "127.0.0.1", 0)
    server.start()
    remote = Remote(server.url, engine, settings, runs[0], runs[1], [], threading.Event())
    tis = [remote.queue(task_id, run_id=run) for run in runs for task_id in ("one", "two")]
    *starting, beating = tis
    group = server.app.state.reports
    answers: dict[int, int] = {}

    def start(ti_id: int) -> None:
        post = Post(ti_id, issue_task_token(SECRET, ti_id, 1), encode(_started(ti_id)))
        response = httpx.post(
            f"{server.url}/execution/v1/messages",
            content=encode_posts([post]),
            headers={"Content-Type": "application/msgpack"},
            timeout=30,
        )
        [reply] = decode_post_replies(response.content)
        answers[ti_id] = reply.status

    try:
        with group._commit:  # a commit under way
            threads = [threading.Thread(target=start, args=(t,)) for t in starting]
            for t in threads:
                t.start()
            wait_for(lambda: group.waiting() == len(starting) or None, timeout=10)
            # Three reports wait and the server has two threads: one is still free.
            beat = httpx.post(
                f"{server.url}/execution/v1/task-instances/{beating}/heartbeat",
                headers={"Authorization": f"Bearer {issue_task_token(SECRET, beating, 1)}"},
                timeout=10,
            )
            assert beat.status_code == 204, beat.text
            assert not answers
        for t in threads:
            t.join(30)
        assert answers == dict.fromkeys(starting, 204)
        assert {remote.ti(t).state for t in starting} == {"running"}
    finally:
        server.stop()
        ctx.wakeups.close()


def test_a_result_reported_twice_is_applied_once(remote: Remote) -> None:
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    channel.send_bytes(encode(_started(ti_id)))
    channel.send_bytes(encode(_finished(ti_id)))
    with pytest.raises(TryNotCurrentError):
        channel.send_bytes(encode(_finished(ti_id, outcome="failed")))
    assert remote.ti(ti_id).state == "success"


def test_stream_items_sent_again_are_stored_once(remote: Remote) -> None:
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    channel.send_bytes(encode(_started(ti_id)))

    def items(first: int, *values: str) -> bytes:
        return encode(StreamItems(ti_id=ti_id, try_number=1, items=list(values), first_index=first))

    channel.send_bytes(items(0, '"a"'))
    channel.send_bytes(items(1, '"b"'))
    channel.send_bytes(items(1, '"b"'))  # a retried request whose answer was lost
    channel.send_bytes(items(2, '"c"'))
    with remote.engine.connect() as conn:
        stored = conn.scalars(
            select(StreamItem.value)
            .join(Stream, Stream.id == StreamItem.stream_id)
            .where(Stream.task_instance_id == ti_id)
            .order_by(StreamItem.index)
        ).all()
    assert stored == ['"a"', '"b"', '"c"']


def test_log_chunks_land_in_the_tries_log_once(remote: Remote) -> None:
    ti_id = remote.queue("one", try_number=2)
    channel = remote.channel(ti_id, try_number=2)
    channel.ship_log("stint-1", 0, b"first line\n")
    channel.ship_log("stint-1", 11, b"second line\n")
    channel.ship_log("stint-1", 11, b"second line\n")  # sent again
    channel.ship_log("stint-2", 0, b"after a resume\n")
    ti = remote.ti(ti_id)
    path = log_path_for(remote.settings.log_folder, ti.dag_id, ti.run_id, "one", -1, 2)
    assert path.read_text() == "first line\nsecond line\nafter a resume\n"


def test_a_shipment_overlapping_one_already_written_adds_only_its_new_bytes(
    remote: Remote,
) -> None:
    # The answer to the first was lost; the worker read more of its log since, and sends
    # from the same offset again.
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    ti = remote.ti(ti_id)
    path = log_path_for(remote.settings.log_folder, ti.dag_id, ti.run_id, "one", -1, 1)
    channel.ship_log("stint-1", 0, b"first line\n")
    channel.ship_log("stint-1", 0, b"first line\nsecond line\n")
    assert path.read_text() == "first line\nsecond line\n"
    channel.ship_log("stint-1", 11, b"second line\nthird line\n")
    assert path.read_text() == "first line\nsecond line\nthird line\n"


def test_a_short_tries_log_goes_with_its_result(remote: Remote, tmp_path: Path) -> None:
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    spool = tmp_path / "attempt=1.log"
    spool.write_bytes(b"Task finished: success\nhalf a li")
    companion = _Companion(channel, spool, heartbeat_seconds=3600)  # not entered: no turns
    channel.carry_log(companion)
    channel.send_bytes(encode(_started(ti_id)))
    channel.send_bytes(encode(_finished(ti_id)))
    ti = remote.ti(ti_id)
    assert ti.state == "success"
    path = log_path_for(remote.settings.log_folder, ti.dag_id, ti.run_id, "one", -1, 1)
    # Complete lines only while the try runs; the rest once it is over.
    assert path.read_bytes() == b"Task finished: success\n"
    companion._over = True  # what its exit does
    companion._finish()
    assert not spool.exists()
    assert path.read_bytes() == b"Task finished: success\nhalf a li"


def test_a_message_whose_log_part_is_miscounted_is_refused(remote: Remote) -> None:
    ti_id = remote.queue("one")
    token = issue_task_token(SECRET, ti_id, 1)
    body = encode(_started(ti_id))
    response = httpx.post(
        f"{remote.url}/execution/v1/task-instances/{ti_id}/messages",
        content=body + b"log\n",
        headers={"Authorization": f"Bearer {token}", LOG_BYTES_HEADER: str(len(body) + 5)},
        params={"log_stint": "s", "log_offset": 0},
    )
    assert response.status_code == 400
    assert LOG_BYTES_HEADER in response.json()["error"]["message"]
    assert remote.ti(ti_id).state == "queued"


def test_a_task_reads_xcoms_of_its_own_run_only(remote: Remote) -> None:
    ti_id = remote.queue("one")
    channel = remote.channel(ti_id)
    request = GetXCom(dag_run_id=remote.other_run_id, task_ids=["one"], key="return_value")
    with pytest.raises(ExecutionApiError, match="403: a task may read XComs of its own run"):
        channel.send_bytes(encode(request))


def _queued_callback(remote: Remote, run_id: int) -> int:
    """A DAG callback row where a scheduler leaves it once sent to a Celery worker."""
    with remote.engine.begin() as conn:
        callback_id: int = conn.execute(
            insert(DagCallback)
            .values(
                dag_run_id=run_id,
                kind="failure",
                reason="task_failure",
                state="queued",
                created_at=_now(),
                queued_at=_now(),
            )
            .returning(DagCallback.id)
        ).scalar_one()
    return callback_id


def test_a_callback_reads_its_runs_xcoms_and_reports_its_end_with_its_own_token(
    remote: Remote,
) -> None:
    ti_id = remote.queue("one")
    writer = remote.channel(ti_id)
    writer.send_bytes(encode(_started(ti_id)))
    writer.send_bytes(encode(_finished(ti_id, xcoms=[XComValue("return_value", "[1, 2]")])))
    callback_id = _queued_callback(remote, remote.run_id)
    token = issue_callback_token(SECRET, callback_id)
    channel = ExecutionApiChannel(remote.url, None, token, callback_id=callback_id, retries=0)
    remote.channels.append(channel)

    channel.send_bytes(
        encode(GetXCom(dag_run_id=remote.run_id, task_ids=["one"], key="return_value"))
    )
    reply = decode_to_worker(channel.recv_bytes())
    assert isinstance(reply, XComReply) and [r.value for r in reply.rows] == ["[1, 2]"]
    with pytest.raises(ExecutionApiError, match="403: a task may read XComs of its own run"):
        channel.send_bytes(
            encode(GetXCom(dag_run_id=remote.other_run_id, task_ids=["one"], key="x"))
        )
    # Neither kind of token passes for the other, nor for another callback.
    url = f"{remote.url}/execution/v1/callbacks/{callback_id}/messages"
    done = encode(DagCallbackFinished(callback_id=callback_id, ok=False, error="pager down"))
    for wrong, status in [
        (issue_task_token(SECRET, ti_id, 1), 401),
        (issue_callback_token(SECRET, callback_id + 1), 403),
    ]:
        response = httpx.post(url, content=done, headers={"Authorization": f"Bearer {wrong}"})
        assert response.status_code == status, response.text
    with pytest.raises(ExecutionApiError, match="401: invalid task token"):
        bad = ExecutionApiChannel(remote.url, ti_id, token, retries=0)
        remote.channels.append(bad)
        bad.heartbeat()

    channel.send_bytes(done)
    with remote.engine.connect() as conn:
        row = conn.execute(select(DagCallback).where(DagCallback.id == callback_id)).one()
    assert (row.state, row.error) == ("failed", "pager down")
    # Its grant ended with it: a second end, or a late read, is told it is over.
    with pytest.raises(TryNotCurrentError, match=f"callback {callback_id} is failed"):
        channel.send_bytes(done)
    with pytest.raises(TryNotCurrentError):
        channel.send_bytes(encode(GetXCom(dag_run_id=remote.run_id, task_ids=["one"], key="x")))


def test_the_execution_api_is_off_without_a_secret_key(
    engine: Engine, database_url: str, tailrace_home: Path
) -> None:
    settings = load_settings(
        {"TAILRACE_HOME": str(tailrace_home), "TAILRACE_DATABASE_URL": database_url}
    )
    ctx = ApiContext(settings, engine, Wakeups(settings.home, engine))
    server = ApiServer(ctx, "127.0.0.1", 0)
    server.start()
    try:
        response = httpx.post(
            f"{server.url}/execution/v1/task-instances/1/heartbeat",
            headers={"Authorization": "Bearer x"},
        )
        assert response.status_code == 503
        message = response.json()["error"]["message"]
        assert "the execution API is off: secret_key is not set" in message
        assert "environment variable TAILRACE_SECRET_KEY" in message
        assert httpx.get(f"{server.url}/execution/v1/health").json() == {"status": "ok"}
    finally:
        server.stop()
        ctx.wakeups.close()


def _post(ti_id: int, message: TaskStarted | TaskFinished, token: str | None = None) -> Post:
    return Post(ti_id, token or issue_task_token(SECRET, ti_id, 1), encode(message))


def _post_all(remote: Remote, posts: list[Post]) -> httpx.Response:
    return httpx.post(
        f"{remote.url}/execution/v1/messages",
        content=encode_posts(posts),
        headers={"Content-Type": "application/msgpack"},
    )


def test_one_tries_result_and_the_next_ones_start_go_in_one_request_and_commit_together(
    remote: Remote,
) -> None:
    from sqlalchemy import event

    first, second = remote.queue("one"), remote.queue("two", run_id=remote.other_run_id)
    remote.channel(first).send_bytes(encode(_started(first)))
    commits: list[int] = []
    event.listen(remote.engine, "commit", lambda conn: commits.append(1))
    response = _post_all(remote, [_post(first, _finished(first)), _post(second, _started(second))])
    assert response.status_code == 200
    assert [(r.status, r.body) for r in decode_post_replies(response.content)] == [
        (204, b""),
        (204, b""),
    ]
    assert commits == [1]
    assert (remote.ti(first).state, remote.ti(second).state) == ("success", "running")
    assert remote.ti(second).hostname == "far-away"


def test_each_post_is_answered_as_its_own_request_would_be(remote: Remote) -> None:
    first, second, third = (
        remote.queue("one"),
        remote.queue("two"),
        remote.queue("one", run_id=remote.other_run_id),
    )
    remote.channel(third).send_bytes(encode(_started(third)))
    replies = decode_post_replies(
        _post_all(
            remote,
            [
                _post(first, _started(first), token="not-a-token"),
                _post(second, _started(second), token=issue_task_token(SECRET, first, 1)),
                _post(third, _finished(third, try_number=2), issue_task_token(SECRET, third, 2)),
                _post(second, _started(second)),
            ],
        ).content
    )
    assert [r.status for r in replies] == [401, 403, 409, 204]
    assert b"no longer current" in replies[2].body
    assert remote.ti(first).state == "queued"
    assert (remote.ti(second).state, remote.ti(third).state) == ("running", "running")


def test_a_request_of_too_many_posts_or_of_none_is_refused(remote: Remote) -> None:
    ti_id = remote.queue("one")
    for posts in ([], [_post(ti_id, _started(ti_id))] * (MAX_POSTS + 1)):
        response = _post_all(remote, posts)
        assert response.status_code == 400
        assert f"1 to {MAX_POSTS} posts" in response.json()["error"]["message"]
    assert _post_all(remote, []).status_code == 400
    garbage = httpx.post(f"{remote.url}/execution/v1/messages", content=b"\xc1")
    assert garbage.status_code == 400
    assert remote.ti(ti_id).state == "queued"


def test_in_a_batch_a_tries_result_waits_for_the_next_ones_start_unless_none_follows(
    remote: Remote,
) -> None:
    """What a Celery worker does with a batch's tries (ADR 0051), on its own channels."""
    first, second = remote.queue("one"), remote.queue("two")
    relay = _Relay()
    one, two = remote.channel(first), remote.channel(second)
    one.relay_through(relay)
    two.relay_through(relay)

    one.send_bytes(encode(_started(first)))
    assert remote.ti(first).state == "running"
    one.send_bytes(encode(_finished(first)))
    assert remote.ti(first).state == "running"  # owed: it goes with the next start
    two.send_bytes(encode(_started(second)))
    assert (remote.ti(first).state, remote.ti(second).state) == ("success", "running")
    relay.more = False  # the batch's last try: its result goes at once
    two.send_bytes(encode(_finished(second)))
    assert remote.ti(second).state == "success"
    assert relay.owed is None


def test_a_batch_tries_large_result_goes_at_once_and_a_refused_start_still_delivers_the_owed(
    remote: Remote,
) -> None:
    first, second, third = (
        remote.queue("one"),
        remote.queue("two"),
        remote.queue("one", run_id=remote.other_run_id),
    )
    relay = _Relay()
    channels = [remote.channel(first), remote.channel(second), remote.channel(third, 2)]
    for channel in channels:
        channel.relay_through(relay)
    big = XComValue("return_value", '"' + "x" * OWED_BYTES + '"')
    channels[0].send_bytes(encode(_started(first)))
    channels[0].send_bytes(encode(_finished(first, xcoms=[big])))
    assert remote.ti(first).state == "success"
    assert relay.owed is None
    channels[1].send_bytes(encode(_started(second)))
    channels[1].send_bytes(encode(_finished(second)))
    assert remote.ti(second).state == "running"
    # The next try was cleared (the instance is at try 1, not 2): its start is refused,
    # and the owed result lands all the same.
    with pytest.raises(TryNotCurrentError):
        channels[2].send_bytes(encode(_started(third, try_number=2)))
    assert (remote.ti(second).state, remote.ti(third).state) == ("success", "queued")


def test_a_batch_hands_back_what_has_not_begun_once() -> None:
    sent_back: list[list[list[str]]] = []
    batch = _Batch([["a", "ta"], ["b", "tb"], ["c", "tc"]], sent_back.append)
    assert batch.take() == (["a", "ta"], True)
    batch.hand_back()
    batch.hand_back()
    assert sent_back == [[["b", "tb"], ["c", "tc"]]]
    assert batch.take() == (None, False)


def test_a_batch_the_broker_cannot_take_back_runs_on_where_it_is() -> None:
    def broker_away(rest: list[list[str]]) -> None:
        raise ConnectionError("the broker is away")

    batch = _Batch([["a", "ta"], ["b", "tb"]], broker_away)
    assert batch.take() == (["a", "ta"], True)
    batch.hand_back()
    assert batch.take() == (["b", "tb"], False)
