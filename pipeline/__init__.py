"""leaseq on Apache Spark (PySpark 4): DataFrames into queues, and the log
as a DataFrame of events.

``register(spark)`` registers the data source on a session::

    from leaseq.pipeline import register
    register(spark)
    (df.write.format("leaseq")
       .option("url", "redis://127.0.0.1:6479/0").option("queue", "emails")
       .option("keyColumn", "order_id")
       .mode("append").save())

    events = spark.read.format("leaseq-log").load("/var/lib/leaseq")

The writer (``leaseq.pipeline.sink``) and the reader
(``leaseq.pipeline.logsource``) are documented in docs/spark.md.
Needs the ``spark`` extra: ``pip install 'leaseq[spark]'``.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the ``leaseq`` and ``leaseq-log`` data sources on ``spark``
    (a registration belongs to one SparkSession)."""
    from .logsource import LeaseqLogDataSource
    from .sink import LeaseqDataSource

    spark.dataSource.register(LeaseqDataSource)
    spark.dataSource.register(LeaseqLogDataSource)
