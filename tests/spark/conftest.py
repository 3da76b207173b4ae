"""One local SparkSession for the Spark tests (``local[2,3]``: two cores,
three attempts per task, so a task that fails once is retried)."""

from __future__ import annotations

import os
import sys

import pytest

# workers run this interpreter (with leaseq and pyarrow), and bind to loopback
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from leaseq.pipeline import register

    session = (SparkSession.builder.master("local[2,3]").appName("leaseq-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "512m")
               .getOrCreate())
    session.sparkContext.setLogLevel("OFF")
    register(session)
    yield session
    session.stop()
