"""``MetadataView``: what Metadata shows of a topic's partitions."""
from __future__ import annotations

from ingest_fakes import FakeMetadataCache, broker_info

from ember.cluster.records import PartitionState
from ember.ingest.metadata_view import MetadataView


def test_a_new_topic_shows_its_first_leaders_before_its_states_are_read() -> None:
    """The leaders a client is told of as soon as the topic record is known (a live first
    replica); a first replica that is down shows no leader, with the reason."""
    cache = FakeMetadataCache(brokers=(1, 2))
    cache.put_topic("t", {0: [1, 2], 1: [3, 1], 2: [2, 1]}, states={2: PartitionState(1, 3, [1], 5, 4)})
    meta = cache.topic("t")
    assert meta is not None
    view = MetadataView(cache, None, lambda m, index: f"no leader for {m.name}-{index}")  # type: ignore[arg-type]
    shown = {p.index: p for p in view.partitions(meta, {b: broker_info(b) for b in (1, 2)})}
    assert (shown[0].leader, shown[0].leader_epoch, shown[0].isr, shown[0].error) == (1, 0, [1, 2], None)
    assert shown[1].leader == -1 and str(shown[1].error) == "no leader for t-1"
    assert (shown[2].leader, shown[2].leader_epoch, shown[2].isr) == (1, 3, [1])
