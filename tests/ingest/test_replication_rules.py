"""The pure rules of replication: where a follower truncates, when a follower counts as caught up."""
from __future__ import annotations

from ember.ingest.isr import FollowerProgress
from ember.ingest.replica_fetcher import truncation_point
from ember.log.epoch_cache import LeaderEpochCache


def follower_epochs(tmp_path, entries: list[tuple[int, int]], log_end: int):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in entries:
        cache.assign(epoch, start)
    return lambda epoch: cache.end_offset_for(epoch, log_end)


def test_same_epoch_truncates_to_the_shorter_log(tmp_path) -> None:
    # Old leader (epoch 0 up to 13) comes back; the new leader only had epoch 0 up to 10.
    assert truncation_point(0, 10, 13, follower_epochs(tmp_path, [(0, 0)], 13)) == (10, True)
    # A follower behind the leader keeps everything.
    assert truncation_point(0, 10, 7, follower_epochs(tmp_path, [(0, 0)], 7)) == (7, True)


def test_divergent_epoch_truncates_where_the_epochs_part(tmp_path) -> None:
    # The follower led briefly at epoch 2 (from offset 8); the leader never saw epoch 2 and
    # answers that epoch 1 ended at 9 in its log. The follower's epoch 1 ended at 8: cut there.
    ends = follower_epochs(tmp_path, [(0, 0), (1, 5), (2, 8)], 12)
    assert truncation_point(1, 9, 12, ends) == (8, True)


def test_unknown_leader_epoch_needs_another_round(tmp_path) -> None:
    # The leader answers epoch 3, which this follower never saw: cut to the end of epoch 1
    # (its largest earlier epoch) and ask again.
    ends = follower_epochs(tmp_path, [(0, 0), (1, 5), (4, 9)], 12)
    assert truncation_point(3, 11, 12, ends) == (9, False)


def test_leader_without_epochs_keeps_at_most_its_log(tmp_path) -> None:
    ends = follower_epochs(tmp_path, [(0, 0)], 6)
    assert truncation_point(-1, 4, 6, ends) == (4, True)
    assert truncation_point(-1, 9, 6, ends) == (6, True)


def test_follower_caught_up_rules() -> None:
    progress = FollowerProgress(last_caught_up_ms=0)
    progress.fetched(10, 10, at_ms=100)          # at the log end
    assert progress.last_caught_up_ms == 100 and progress.end_offset == 10
    progress.fetched(10, 15, at_ms=200)          # reached where the log ended at the last fetch
    assert progress.last_caught_up_ms == 100
    progress.fetched(15, 20, at_ms=300)
    assert progress.last_caught_up_ms == 200
    progress.fetched(16, 40, at_ms=400)          # fell behind the previous log end (20)
    assert progress.last_caught_up_ms == 200
    assert progress.lagging(at_ms=1300, lag_max_ms=1000) and not progress.lagging(at_ms=1100, lag_max_ms=1000)
