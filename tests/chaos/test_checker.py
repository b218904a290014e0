"""The chaos checker fails on synthetic histories with one known defect each (lost record,
duplicate, reorder, phantom read, ...) and passes the same history without it, so a passing chaos
run means something."""
from __future__ import annotations

from .checker import check
from .history import FinalState, History, ProducerLog, record_value

BOUND_S = 40.0


def clean_run() -> tuple[History, FinalState]:
    """Two producers, two partitions, 6 records each, all acknowledged, read and committed;
    three identical replicas."""
    history = History(BOUND_S)
    logs: dict[int, list[bytes]] = {0: [], 1: []}
    for producer in (0, 1):
        history.producers.append(log := ProducerLog(producer))
        for seq in range(6):
            partition = seq % 2
            log.sent(partition, now=0.0)
            log.acked(seq, len(logs[partition]), now=1.0)
            logs[partition].append(record_value(producer, seq))
    for partition, values in logs.items():
        history.live.read(partition, list(range(len(values))), list(values))
        history.live.position(partition, len(values))
        history.group.read(partition, list(range(len(values))), list(values))
        history.high_watermarks[partition] = [0, 3, len(values)]
        history.commits.append((partition, len(values)))
    history.timing("broker 1 serves again after kill-broker", 3.0, 45.0)
    final = FinalState({p: len(v) for p, v in logs.items()}, logs,
                       {p: {b: list(v) for b in (1, 2, 3)} for p, v in logs.items()},
                       {p: len(v) for p, v in logs.items()})
    return history, final


def failures(history: History, final: FinalState) -> dict[str, list[str]]:
    return {r.name: r.violations for r in check(history, final) if not r.ok}


def test_a_clean_history_passes_every_check() -> None:
    assert failures(*clean_run()) == {}


def test_a_lost_acknowledged_record_fails() -> None:
    history, final = clean_run()
    final.logs[0].pop()          # the last record of partition 0 is gone
    final.high_watermarks[0] -= 1
    names = failures(history, final)
    assert any("lost: producer 1 seq 4" in v for v in names["every acknowledged record is at the offset its ack named"])


def test_a_record_at_another_offset_than_its_ack_fails() -> None:
    history, final = clean_run()
    history.producers[0].acked(0, 1)     # acknowledged at offset 1, but it is at 0
    assert "every acknowledged record is at the offset its ack named" in failures(history, final)


def test_a_duplicate_fails() -> None:
    history, final = clean_run()
    final.logs[1].append(final.logs[1][0])
    assert any("duplicate" in v for v in failures(history, final)["no record twice, none unknown or in the wrong partition"])


def test_an_unknown_record_fails() -> None:
    history, final = clean_run()
    final.logs[1].append(b"not ours")
    assert any("unknown record" in v for v in failures(history, final)["no record twice, none unknown or in the wrong partition"])


def test_a_reorder_within_a_producer_fails() -> None:
    history, final = clean_run()
    log = final.logs[0]
    log[0], log[2] = log[2], log[0]      # producer 0's seq 0 and seq 2 swapped (acks said otherwise)
    found = failures(history, final)
    assert any("reordered: producer 0 seq 0" in v for v in found["per-producer order within each partition"])


def test_a_phantom_read_fails() -> None:
    history, final = clean_run()
    history.live.read(1, [6], [record_value(7, 7)])   # read a record the final log never held
    found = failures(history, final)
    assert any("phantom read" in v for v in found["live consumer: every record read is in the final log at the same offset"])


def test_a_read_that_differs_from_the_final_log_fails() -> None:
    history, final = clean_run()
    history.group.reads[0][0][1][2] = record_value(1, 0)
    assert "group consumer: every record read is in the final log at the same offset" in failures(history, final)


def test_a_consumer_position_going_back_fails() -> None:
    history, final = clean_run()
    history.live.position(0, 2)
    assert any("went back" in v for v in
               failures(history, final)["live consumer: positions never go back, no offset skipped or re-read, caught up"])


def test_a_skipped_offset_fails() -> None:
    history, final = clean_run()
    offsets, values = history.live.reads[1][0]
    del offsets[1], values[1]
    assert "live consumer: positions never go back, no offset skipped or re-read, caught up" in failures(history, final)


def test_a_high_watermark_going_back_fails() -> None:
    history, final = clean_run()
    history.high_watermark(0, 2)
    assert "the high watermark never goes back" in failures(history, final)


def test_a_diverging_replica_fails() -> None:
    history, final = clean_run()
    final.replicas[1][3][2] = record_value(0, 0)
    found = failures(history, final)["replicas identical below the high watermark"]
    assert [v.split(":")[0] for v in found] == ["partition 1"]
    assert "broker 3 differs from broker 1 at offset 2" in found[0]


def test_a_commit_ahead_of_the_high_watermark_fails() -> None:
    history, final = clean_run()
    history.commits.append((1, 99))
    assert "committed group offsets never ahead of the high watermark" in failures(history, final)


def test_an_unresolved_or_late_send_fails() -> None:
    history, final = clean_run()
    history.producers[0].sent(0, now=0.0)                 # never resolved
    history.producers[1].resolved_at[0] = BOUND_S + 5     # resolved too late
    found = failures(history, final)[f"every send resolves within {BOUND_S:.0f}s"]
    assert any("never resolved" in v for v in found) and any("after the bound" in v for v in found)


def test_a_close_that_never_returned_fails() -> None:
    history, final = clean_run()
    history.timing("producer-0 close()", None, 30.0)
    assert "every close, restart and heal is bounded; nothing hangs" in failures(history, final)
