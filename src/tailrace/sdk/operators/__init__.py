"""The standard operators."""

from tailrace.sdk.operators.bash import BashOperator
from tailrace.sdk.operators.empty import EmptyOperator
from tailrace.sdk.operators.latest_only import LatestOnlyOperator
from tailrace.sdk.operators.python import (
    BaseBranchOperator,
    BranchExternalPythonOperator,
    BranchPythonOperator,
    BranchPythonVirtualenvOperator,
    ExternalPythonOperator,
    PythonOperator,
    PythonVirtualenvOperator,
    ShortCircuitOperator,
)

__all__ = [
    "BaseBranchOperator",
    "BashOperator",
    "BranchExternalPythonOperator",
    "BranchPythonOperator",
    "BranchPythonVirtualenvOperator",
    "EmptyOperator",
    "ExternalPythonOperator",
    "LatestOnlyOperator",
    "PythonOperator",
    "PythonVirtualenvOperator",
    "ShortCircuitOperator",
]
