"""The read_committed filter (Kafka's consumer algorithm, per batch) against a model of
interleaved transactions: it keeps exactly the committed and non-transactional batches."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ember.record.control import AbortedFilter, marker_batch
from ember.record.header import KAFKA_MAGIC, TRANSACTIONAL_FLAG, BatchHeader

Step = tuple[str, int]   # ("data" | "plain" | "commit" | "abort", producer id)


def data_header(offset: int, pid: int, transactional: bool) -> BatchHeader:
    return BatchHeader(offset, 100, 0, KAFKA_MAGIC, 0, TRANSACTIONAL_FLAG if transactional else 0, 0, 0, 0,
                       pid, 0, 0, 1)


def replay(steps: list[Step]) -> tuple[list[tuple[BatchHeader, bytes]], list[tuple[int, int]], list[int], int]:
    """The batches the steps write (one offset each), the aborted transactions a Fetch from 0 lists,
    the offsets a read_committed reader must get, and the last stable offset (the first offset of a
    transaction still open at the end: a reader stops there)."""
    batches: list[tuple[BatchHeader, bytes]] = []
    open_txns: dict[int, list[int]] = {}
    aborted: list[tuple[int, int]] = []
    wanted: list[int] = []
    for offset, (action, pid) in enumerate(steps):
        if action in ("commit", "abort"):
            raw = bytearray(marker_batch(pid, 0, 0, action == "commit", 0))
            raw[0:8] = offset.to_bytes(8, "big")
            batches.append((BatchHeader.parse(raw), bytes(raw)))
            written = open_txns.pop(pid, [])
            if action == "abort":
                aborted.append((pid, written[0] if written else offset))
            else:
                wanted += written
            continue
        batches.append((data_header(offset, pid, action == "data"), b""))
        if action == "data":
            open_txns.setdefault(pid, []).append(offset)
        else:
            wanted.append(offset)
    stable = min([first for first, *_ in open_txns.values()], default=len(steps))
    return batches, aborted, [o for o in sorted(wanted) if o < stable], stable


_steps = st.lists(st.tuples(st.sampled_from(["data", "data", "plain", "commit", "abort"]),
                            st.integers(min_value=1, max_value=4)), max_size=60)


@given(_steps)
def test_a_read_committed_reader_gets_exactly_the_committed_and_plain_batches(steps: list[Step]) -> None:
    batches, aborted, wanted, stable = replay(steps)
    keep = AbortedFilter(aborted)
    assert [h.base_offset for h, raw in batches[:stable] if keep.keep(h, raw)] == wanted


def test_a_producer_that_aborts_then_commits_loses_only_the_aborted_batches() -> None:
    batches, aborted, wanted, _ = replay([("data", 1), ("abort", 1), ("data", 1), ("commit", 1), ("plain", 1)])
    keep = AbortedFilter(aborted)
    assert [h.base_offset for h, raw in batches if keep.keep(h, raw)] == wanted == [2, 4]
