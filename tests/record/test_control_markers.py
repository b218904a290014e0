"""Reading a transaction marker: the bytes-level path for one uncompressed record gives what a full
decode gives, for every marker the log writes (fresh, and stamped with a delete horizon), and a
control batch that holds no marker is refused either way."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember import errors
from ember.record import control
from ember.record.crc import crc32c
from ember.record.header import CRC_START, HEADER_SIZE, BatchHeader


def decoded(batch: bytes) -> control.Marker:
    """The marker through the full decode (the fast path switched off)."""
    header = BatchHeader.parse(batch)
    original = control._marker_fields
    control._marker_fields = lambda *_: None          # type: ignore[assignment]
    try:
        return control.read_marker(header, batch)
    finally:
        control._marker_fields = original           # type: ignore[assignment]


@given(st.integers(0, 2**62), st.integers(0, 32767), st.integers(-1, 2**31 - 1), st.booleans(),
       st.integers(0, 2**45), st.one_of(st.none(), st.integers(0, 2**45)))
def test_a_marker_read_from_its_bytes_equals_the_decoded_one(pid, epoch, coordinator_epoch, commit, timestamp,
                                                             horizon):
    batch = control.marker_batch(pid, epoch, coordinator_epoch, commit, timestamp)
    if horizon is not None:
        batch = control.with_delete_horizon(BatchHeader.parse(batch), batch, horizon)
    header = BatchHeader.parse(batch)
    assert control._marker_fields(header, memoryview(batch)) is not None      # the fast path took it
    fast = control.read_marker(header, batch)
    assert fast == decoded(batch) == control.Marker(pid, epoch, commit, coordinator_epoch)


def test_a_record_that_is_not_a_marker_is_refused_by_both_paths():
    batch = bytearray(control.marker_batch(7, 0, 0, True, 1000))
    key_at = batch.index(b"\x00\x00\x00\x01", HEADER_SIZE)   # the key: version 0, type 1 (commit)
    batch[key_at + 3] = 9                               # an unknown control record type
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    for read in (lambda b: control.read_marker(BatchHeader.parse(b), b), decoded):
        with pytest.raises(errors.CorruptRecord, match="type 9"):
            read(bytes(batch))
