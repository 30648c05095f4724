"""S3: a key sensor with Airflow's arguments (wildcards, regular expressions, deferrable)
and a listing stream (paged ``ListObjectsV2``, one event per page)."""

from __future__ import annotations

import asyncio
import fnmatch
import re
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from tailrace.providers.amazon._client import aws_client
from tailrace.sdk.errors import TailraceError
from tailrace.sdk.sensors import BaseSensorOperator
from tailrace.sdk.triggers import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from tailrace.sdk._context import Context

# The fields of a listed object (ListObjectsV2); ``metadata_keys=["*"]`` takes them all.
_LISTED = ("Key", "Size", "ETag", "LastModified", "StorageClass")


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` → ``("bucket", "some/key")``."""
    parts = urlsplit(url)
    if parts.scheme not in ("s3", "s3a", "s3n") or not parts.netloc:
        raise ValueError(f"{url!r} is not an s3://bucket/key URL")
    return parts.netloc, parts.path.removeprefix("/")


def _listed(obj: dict[str, Any], metadata_keys: Sequence[str]) -> dict[str, Any]:
    fields = _LISTED if "*" in metadata_keys else metadata_keys
    out: dict[str, Any] = {}
    for name in fields:
        value = obj.get(name)
        out[name] = value.isoformat() if isinstance(value, datetime) else value
    return out


async def _list(client: Any, bucket: str, prefix: str) -> AsyncIterator[dict[str, Any]]:
    paginator = client.get_paginator("list_objects_v2")
    async for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj


async def matching_files(
    client: Any,
    bucket: str,
    key: str,
    *,
    wildcard_match: bool,
    use_regex: bool,
    metadata_keys: Sequence[str],
) -> list[dict[str, Any]]:
    """The objects of ``bucket`` matching ``key`` as Airflow's S3KeySensor matches it
    (``fnmatch`` for wildcards, ``re.match`` for a regex, else the key itself)."""
    from botocore.exceptions import ClientError

    if wildcard_match:
        prefix = re.split(r"[\[*?]", key, maxsplit=1)[0]
        return [
            _listed(obj, metadata_keys)
            async for obj in _list(client, bucket, prefix)
            if fnmatch.fnmatch(obj["Key"], key)
        ]
    if use_regex:
        pattern = re.compile(key)
        return [
            _listed(obj, metadata_keys)
            async for obj in _list(client, bucket, "")
            if pattern.match(obj["Key"])
        ]
    try:
        head = await client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return []
        raise
    return [_listed({"Key": key, "Size": head.get("ContentLength"), **head}, metadata_keys)]


class S3KeyTrigger(BaseTrigger):
    """Polls until every key of ``bucket_key`` (in ``bucket_name``) exists, matched as
    :class:`S3KeySensor` matches; yields ``{"status": "success", "files": [...]}``, or
    ``{"status": "running", "files": [...]}`` when ``should_check_fn`` (the sensor's
    ``check_fn`` then decides on a worker)."""

    def __init__(
        self,
        *,
        bucket_name: str,
        bucket_key: list[str],
        wildcard_match: bool = False,
        use_regex: bool = False,
        aws_conn_id: str = "aws_default",
        verify: bool | str | None = None,
        poke_interval: float = 5.0,
        should_check_fn: bool = False,
        metadata_keys: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.bucket_name = bucket_name
        self.bucket_key = list(bucket_key)
        self.wildcard_match = wildcard_match
        self.use_regex = use_regex
        self.aws_conn_id = aws_conn_id
        self.verify = verify
        self.poke_interval = float(poke_interval)
        self.should_check_fn = should_check_fn
        self.metadata_keys = list(metadata_keys or ["Size"])

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.providers.amazon.S3KeyTrigger", {
            "bucket_name": self.bucket_name,
            "bucket_key": self.bucket_key,
            "wildcard_match": self.wildcard_match,
            "use_regex": self.use_regex,
            "aws_conn_id": self.aws_conn_id,
            "verify": self.verify,
            "poke_interval": self.poke_interval,
            "should_check_fn": self.should_check_fn,
            "metadata_keys": self.metadata_keys,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        async with aws_client("s3", self.aws_conn_id, verify=self.verify) as client:
            poke = 0
            while True:
                poke += 1
                files = await check_keys(
                    client,
                    self.bucket_name,
                    self.bucket_key,
                    wildcard_match=self.wildcard_match,
                    use_regex=self.use_regex,
                    metadata_keys=self.metadata_keys,
                )
                if files is not None:
                    status = "running" if self.should_check_fn else "success"
                    yield TriggerEvent({"status": status, "files": files})
                    return
                self.log.info(
                    "poke %d: s3://%s/%s not found, waiting %g s",
                    poke,
                    self.bucket_name,
                    ", ".join(self.bucket_key),
                    self.poke_interval,
                )
                await asyncio.sleep(self.poke_interval)


async def check_keys(
    client: Any,
    bucket: str,
    keys: Sequence[str],
    *,
    wildcard_match: bool,
    use_regex: bool,
    metadata_keys: Sequence[str],
) -> list[dict[str, Any]] | None:
    """The matching files of every key, or None while one of them matches nothing."""
    files: list[dict[str, Any]] = []
    for key in keys:
        found = await matching_files(
            client,
            bucket,
            key,
            wildcard_match=wildcard_match,
            use_regex=use_regex,
            metadata_keys=metadata_keys,
        )
        if not found:
            return None
        files.extend(found)
    return files


class S3KeySensor(BaseSensorOperator):
    """Waits for one or more keys in an S3 bucket, as Airflow's ``S3KeySensor``.

    ``bucket_key`` is a key or a list of keys, relative to ``bucket_name``, or full
    ``s3://bucket/key`` URLs when ``bucket_name`` is None. ``wildcard_match=True`` matches
    them as Unix shell patterns (``data/*.csv``), ``use_regex=True`` as regular
    expressions; all of them must match. ``check_fn(files)``, when given, is called with
    the matched files' metadata (``metadata_keys``, ``["Size"]`` by default, ``["*"]``
    for every listed field) and must return True. ``deferrable=True`` (or
    :class:`S3KeySensorAsync`) waits in the triggerer, holding no worker slot.
    ``aws_conn_id`` names a connection of type ``aws``; ``verify`` is botocore's.
    """

    template_fields: ClassVar[tuple[str, ...]] = ("bucket_key", "bucket_name")

    def __init__(
        self,
        *,
        bucket_key: str | list[str],
        bucket_name: str | None = None,
        wildcard_match: bool = False,
        check_fn: Callable[..., bool] | None = None,
        aws_conn_id: str | None = "aws_default",
        verify: str | bool | None = None,
        use_regex: bool = False,
        metadata_keys: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if wildcard_match and use_regex:
            raise TailraceError(
                f"S3KeySensor {self.task_id!r}: wildcard_match and use_regex both set",
                hint="Choose one way to match bucket_key.",
            )
        if aws_conn_id is None:
            raise TailraceError(
                f"S3KeySensor {self.task_id!r}: aws_conn_id=None (boto3's default credential "
                "chain) is not supported",
                hint="Name a connection of type aws (aws://KEY:SECRET@/?region_name=...).",
            )
        self.bucket_key = bucket_key
        self.bucket_name = bucket_name
        self.wildcard_match = wildcard_match
        self.check_fn = check_fn
        self.aws_conn_id = aws_conn_id
        self.verify = verify
        self.use_regex = use_regex
        self.metadata_keys = list(metadata_keys or ["Size"])

    def _bucket_and_keys(self) -> tuple[str, list[str]]:
        keys = [self.bucket_key] if isinstance(self.bucket_key, str) else list(self.bucket_key)
        if self.bucket_name is not None:
            if any(k.startswith("s3://") for k in keys):
                raise TailraceError(
                    f"S3KeySensor {self.task_id!r}: bucket_name is given, so bucket_key must "
                    "be relative to it, not an s3:// URL",
                    hint="Drop bucket_name, or give the keys without s3://bucket/.",
                )
            return self.bucket_name, keys
        buckets_keys = [split_s3_url(k) for k in keys]
        buckets = {b for b, _ in buckets_keys}
        if len(buckets) != 1:
            raise TailraceError(
                f"S3KeySensor {self.task_id!r}: bucket_key names {len(buckets)} buckets",
                hint="Wait on one bucket per sensor.",
            )
        return buckets.pop(), [k for _, k in buckets_keys]

    async def _check(self) -> list[dict[str, Any]] | None:
        bucket, keys = self._bucket_and_keys()
        assert self.aws_conn_id is not None
        async with aws_client("s3", self.aws_conn_id, verify=self.verify) as client:
            return await check_keys(
                client,
                bucket,
                keys,
                wildcard_match=self.wildcard_match,
                use_regex=self.use_regex,
                metadata_keys=self.metadata_keys,
            )

    def poke(self, context: Context) -> bool:
        files = asyncio.run(self._check())
        if files is None:
            return False
        return self.check_fn(files) if self.check_fn is not None else True

    def deferral_trigger(self, context: Context) -> S3KeyTrigger:
        bucket, keys = self._bucket_and_keys()
        assert self.aws_conn_id is not None
        return S3KeyTrigger(
            bucket_name=bucket,
            bucket_key=keys,
            wildcard_match=self.wildcard_match,
            use_regex=self.use_regex,
            aws_conn_id=self.aws_conn_id,
            verify=self.verify,
            poke_interval=self.poke_interval,
            should_check_fn=self.check_fn is not None,
            metadata_keys=self.metadata_keys,
        )

    def deferral_timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout)

    def execute_complete(self, context: Context, event: Any = None) -> None:
        """Resumes when the keys exist; with a ``check_fn`` that says no, waits again."""
        running = event.get("status") == "running" and self.check_fn is not None
        if running and not self.check_fn(event["files"]):  # type: ignore[misc]
            self.defer(
                trigger=self.deferral_trigger(context),
                method_name="execute_complete",
                timeout=self.deferral_timeout(),
                timeout_outcome="skipped" if self.soft_fail else "failed_no_retry",
            )


class S3KeySensorAsync(S3KeySensor):
    """:class:`S3KeySensor` that always waits in the triggerer, freeing its worker slot."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["deferrable"] = True
        super().__init__(**kwargs)


class S3ListTrigger(BaseTrigger):
    """Streams the objects of ``bucket_name`` under ``prefix``, one event per page of
    ``ListObjectsV2`` (``page_size`` keys at most): ``{"page": n, "objects": [{"Key",
    "Size", "ETag", "LastModified"}, ...]}``. Each event's checkpoint is the next page's
    continuation token, so after a triggerer dies another continues from the next page.
    ``delimiter`` lists one level (the page's ``"prefixes"`` then carry the common
    prefixes). Consume it in batches (``handle_trigger_events``) into a task's output
    stream, and downstream with ``.iterate()``.
    """

    def __init__(
        self,
        *,
        bucket_name: str,
        prefix: str = "",
        delimiter: str = "",
        page_size: int = 1000,
        aws_conn_id: str = "aws_default",
        verify: bool | str | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= page_size <= 1000:
            raise ValueError("page_size must be between 1 and 1000 (S3's limit)")
        self.bucket_name = bucket_name
        self.prefix = prefix
        self.delimiter = delimiter
        self.page_size = page_size
        self.aws_conn_id = aws_conn_id
        self.verify = verify

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "tailrace.providers.amazon.S3ListTrigger", {
            "bucket_name": self.bucket_name,
            "prefix": self.prefix,
            "delimiter": self.delimiter,
            "page_size": self.page_size,
            "aws_conn_id": self.aws_conn_id,
            "verify": self.verify,
        }

    async def run(self) -> AsyncIterator[TriggerEvent]:
        token: str | None = None
        page = 0
        if self.checkpoint:
            token, page = self.checkpoint["token"], int(self.checkpoint["page"])
            if token is None:
                return
        async with aws_client("s3", self.aws_conn_id, verify=self.verify) as client:
            while True:
                request: dict[str, Any] = {
                    "Bucket": self.bucket_name,
                    "Prefix": self.prefix,
                    "MaxKeys": self.page_size,
                }
                if self.delimiter:
                    request["Delimiter"] = self.delimiter
                if token is not None:
                    request["ContinuationToken"] = token
                reply = await client.list_objects_v2(**request)
                page += 1
                token = reply.get("NextContinuationToken") if reply.get("IsTruncated") else None
                payload: dict[str, Any] = {
                    "page": page,
                    "objects": [
                        _listed(o, ("Key", "Size", "ETag", "LastModified"))
                        for o in reply.get("Contents", [])
                    ],
                }
                if self.delimiter:
                    payload["prefixes"] = [p["Prefix"] for p in reply.get("CommonPrefixes", [])]
                yield TriggerEvent(payload, checkpoint={"token": token, "page": page})
                if token is None:
                    return
