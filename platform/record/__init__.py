"""ember.record — the record-batch format (header, CRC, Arrow payload), shared by the clients that
build and decode batches and the log that stores them; it imports nothing of either.

See docs/log.md ("Batch format").
"""
from ember.record.batch import Record, build_batch, decode_batches, iter_batches, to_table
from ember.record.header import HEADER_SIZE, BatchHeader
from ember.record.schema import DECODED_SCHEMA, RECORD_SCHEMA

__all__ = ["DECODED_SCHEMA", "HEADER_SIZE", "RECORD_SCHEMA", "BatchHeader", "Record", "build_batch",
           "decode_batches", "iter_batches", "to_table"]
