"""Amazon Web Services on aiobotocore: an SQS queue trigger (exactly once into Tailrace,
like the other queue triggers), an S3 key sensor with Airflow's arguments, and an S3
listing stream.

A connection has type ``aws``: ``aws://ACCESS_KEY_ID:SECRET@/?region_name=eu-west-1``,
with ``endpoint_url`` (URL-encoded) for an S3/SQS-compatible server.
"""

from tailrace.providers.amazon._client import aws_client, client_options
from tailrace.providers.amazon._s3 import (
    S3KeySensor,
    S3KeySensorAsync,
    S3KeyTrigger,
    S3ListTrigger,
    split_s3_url,
)
from tailrace.providers.amazon._sqs import CredentialsRefusedError, SqsQueueTrigger

__all__ = [  # noqa: RUF022 - grouped by concept
    # SQS
    "SqsQueueTrigger",
    "CredentialsRefusedError",
    # S3
    "S3KeySensor",
    "S3KeySensorAsync",
    "S3KeyTrigger",
    "S3ListTrigger",
    "split_s3_url",
    # connections
    "aws_client",
    "client_options",
]
