"""``append_at_leaders`` with a transactional id: the checks that keep a batch out of a transaction
that ended while its Produce waited (on the coordinator's answer for another partition), over real
``Partition``s and a scripted coordinator."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from ingest_fakes import MakePartition, batch, run

from ember.cluster.records import PartitionState
from ember.errors import InvalidProducerEpoch, InvalidTxnState, NotCoordinator, NotEnoughReplicas, ProducerFenced
from ember.ingest.produce import Produced, ProduceEntry, append_at_leaders
from ember.record.control import Marker
from ember.security.authorizer.access import ALLOW_ALL


class ScriptedVerifier:
    """Answers every partition with ``answer`` after running ``meanwhile`` (what happens while the
    leader waits for the coordinator)."""

    def __init__(self, answer: Exception | None = None, meanwhile: Callable[[], Any] | None = None) -> None:
        self.answer, self.meanwhile = answer, meanwhile
        self.asked: list[tuple[list[tuple[str, int]], bool]] = []

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Any, add: bool = False) -> dict[tuple[str, int], Exception | None]:
        partitions = list(partitions)
        self.asked.append((partitions, add))
        if self.meanwhile is not None:
            await self.meanwhile()
        return {p: self.answer for p in partitions}


def txn(sequence: int) -> bytes:
    return batch(2, producer_id=7, producer_epoch=0, base_sequence=sequence, transactional=True)


def led(make_partition: MakePartition, count: int) -> tuple[SimpleNamespace, list]:
    partitions = [make_partition(broker_id=1, replicas=(1,)) for _ in range(count)]
    for p in partitions:
        p.apply_state(PartitionState(1, 0, [1], 1, 0))
    by_index = {p.index: p for p in partitions}
    replicas = SimpleNamespace(access=ALLOW_ALL, leader_partition=lambda _topic, index: by_index[index])
    return replicas, partitions


def test_a_batch_whose_open_transaction_ended_while_the_produce_waited_is_refused(make_partition):
    async def scenario() -> None:
        replicas, (x, y) = led(make_partition, 2)
        await x.append(memoryview(txn(0)), 1, x.verification_guard(7))      # the transaction is open at x
        verifier = ScriptedVerifier(meanwhile=lambda: x.write_marker(Marker(7, 0, False, 0)))
        entries = [ProduceEntry("t", x.index, txn(2)), ProduceEntry("t", y.index, txn(0))]
        at_x, at_y = await append_at_leaders(replicas, entries, 1, 5.0, "tx", verifier)
        assert isinstance(at_x, InvalidTxnState)            # not appended after the abort marker
        assert isinstance(at_y, Produced)
        assert verifier.asked == [([("t", y.index)], False)]     # one question, for y only
        assert x.log.open_transactions() == {}

    run(scenario())


def test_the_coordinators_errors_reach_the_producer_as_kafka_maps_them(make_partition):
    async def scenario() -> None:
        replicas, (x,) = led(make_partition, 1)
        entries = [ProduceEntry("t", x.index, txn(0))]
        (fenced,) = await append_at_leaders(replicas, entries, 1, 5.0, "tx", ScriptedVerifier(ProducerFenced("f")))
        assert isinstance(fenced, InvalidProducerEpoch)
        (moving,) = await append_at_leaders(replicas, entries, 1, 5.0, "tx", ScriptedVerifier(NotCoordinator("m")))
        assert isinstance(moving, NotEnoughReplicas)        # every client retries it
        added = ScriptedVerifier()
        (appended,) = await append_at_leaders(replicas, entries, 1, 5.0, "tx", added, add_partitions=True)
        assert isinstance(appended, Produced) and added.asked == [([("t", x.index)], True)]

    run(scenario())
