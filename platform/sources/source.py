"""The Spark data source ``ember``: ``spark.read/readStream`` and ``df.write/writeStream``."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from ember.sources.batch_reader import EmberBatchReader
from ember.sources.options import OptionError, reader_options, wants_headers, writer_options
from ember.sources.schema import spark_schema
from ember.sources.stream_reader import EmberStreamReader
from ember.sources.writer import EmberBatchWriter, EmberStreamWriter


class EmberDataSource(DataSource):
    """Options are parsed where they are used, so a bad option fails the read or write that has it."""

    @classmethod
    def name(cls) -> str:
        return "ember"

    def schema(self) -> StructType:
        return spark_schema(wants_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return EmberBatchReader(reader_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return EmberStreamReader(reader_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> EmberBatchWriter:
        if overwrite:
            raise OptionError('ember topics are append-only: write with mode("append")')
        return EmberBatchWriter(writer_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> EmberStreamWriter:
        return EmberStreamWriter(writer_options(self.options), schema)
