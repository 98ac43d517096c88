"""``register`` checks, in local mode, that Spark's Python workers can import caslake.

A local session's workers run ``PYSPARK_PYTHON`` (default ``python3`` from PATH),
often not the virtual environment the driver runs in; every read then failed in a
task with Spark's "No module named 'caslake'" wrapped in a worker traceback.
"""

from __future__ import annotations

import shutil
import sys

import pytest
from pyspark.sql import SparkSession

import caslake.spark
from caslake.errors import OptionalDependencyMissing
from caslake.spark import check_worker_python

pytestmark = [pytest.mark.spark]


def _python_without_caslake() -> str:
    for exe in ("/usr/bin/python3", shutil.which("python3") or ""):
        if exe and shutil.which(exe) and exe != sys.executable:
            return exe
    pytest.fail("no Python outside the virtual environment to run as a worker")


def test_a_worker_python_without_caslake_is_refused_saying_what_to_set() -> None:
    exe = _python_without_caslake()
    with pytest.raises(OptionalDependencyMissing) as err:
        check_worker_python(exe, "local[2]")
    msg = str(err.value)
    assert exe in msg and "PYSPARK_PYTHON" in msg and sys.executable in msg, msg


def test_the_drivers_own_python_and_remote_masters_pass() -> None:
    check_worker_python(sys.executable, "local[*]")
    check_worker_python("python-that-does-not-exist", "yarn")  # a cluster's own business


def test_register_checks_the_session(spark: SparkSession) -> None:
    caslake.spark.register(spark)  # the test session's workers run this interpreter
