"""Producer ids for idempotent producers, unique cluster-wide.

Brokers claim blocks of ids from ``/producer_id_block`` by compare-and-set and hand them out
locally, so ZooKeeper is written once per block rather than once per producer.
"""
from __future__ import annotations

import json
import threading

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from ember.zk import zk_paths
from ember.zk.zk_session import ZkSession

BLOCK_SIZE = 1000
#: Without transactions a producer id keeps its first epoch; a producer that needs a fresh
#: sequence space asks for a new id.
PRODUCER_EPOCH = 0


class ProducerIdAllocator:
    def __init__(self, session: ZkSession, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        self.session = session
        self.broker_id = broker_id
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1   # last id of the current block (inclusive)

    def next_id(self) -> int:
        """A fresh producer id. Blocking (may write ZooKeeper): call it off the event loop."""
        with self._lock:
            if self._next > self._end:
                self._next, self._end = self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    def _claim_block(self) -> tuple[int, int]:
        client = self.session.client
        while True:
            try:
                data, stat = client.get(zk_paths.PRODUCER_ID_BLOCK)
            except NoNodeError:
                block = self._block(0)
                try:
                    client.create(zk_paths.PRODUCER_ID_BLOCK, block)
                    return 0, self.block_size - 1
                except NodeExistsError:
                    continue
            start = int(json.loads(data)["end"]) + 1
            try:
                client.set(zk_paths.PRODUCER_ID_BLOCK, self._block(start), version=stat.version)
                return start, start + self.block_size - 1
            except BadVersionError:
                continue

    def _block(self, start: int) -> bytes:
        return json.dumps({"broker": self.broker_id, "start": start,
                           "end": start + self.block_size - 1}).encode()
