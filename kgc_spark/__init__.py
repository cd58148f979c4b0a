"""PySpark Structured Streaming jobs as consumer-group members of this coordinator (or any Kafka broker).

    from kgc_spark import register
    register(spark)                                   # spark.dataSource.register(KgcDataSource)
    spark.readStream.format("kgc").option(...)...     # see kgc_spark.source

Needs pyspark >= 4.0 (the Python Data Source streaming API), pyarrow and confluent-kafka: the `spark` extra.
This package talks to the server only over the Kafka protocol; it imports nothing of the server's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kgc_spark.source import FORMAT, SCHEMA, KgcDataSource, KgcStreamReader, instance_id_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "SCHEMA", "KgcDataSource", "KgcStreamReader", "instance_id_for", "register"]


def register(spark: SparkSession) -> None:
    """Make format("kgc") available in this session."""
    spark.dataSource.register(KgcDataSource)
