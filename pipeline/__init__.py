"""leaseq on Apache Spark (PySpark 4): DataFrames into queues.

``register(spark)`` registers the data source on a session::

    from leaseq.pipeline import register
    register(spark)
    (df.write.format("leaseq")
       .option("url", "redis://127.0.0.1:6479/0").option("queue", "emails")
       .option("keyColumn", "order_id")
       .mode("append").save())

The writer (``leaseq.pipeline.sink``) is documented in docs/spark.md.
Needs the ``spark`` extra: ``pip install 'leaseq[spark]'``.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the ``leaseq`` data source on ``spark`` (a registration
    belongs to one SparkSession)."""
    from .sink import LeaseqDataSource

    spark.dataSource.register(LeaseqDataSource)
