"""The broker core both wire protocols' handlers share: one broker's replicas, metadata, topic
administration, producer ids, group and transaction coordinators and controller. A protocol adds a translation layer on top;
it never holds state or logic of its own about records, topics or groups."""
from __future__ import annotations

from dataclasses import dataclass

from ember.cluster.controller import Controller
from ember.cluster.metadata_cache import MetadataCache
from ember.cluster.producer_ids import ProducerIdAllocator
from ember.groups.coordinator import GroupCoordinator
from ember.ingest.broker_config import BrokerConfig
from ember.ingest.metadata_view import MetadataView
from ember.ingest.replica_manager import ReplicaManager
from ember.ingest.topic_changes import TopicChanges
from ember.ingest.transactions.coordinator import TransactionCoordinator
from ember.ingest.transactions.local_markers import LeaderMarkers
from ember.ingest.transactions.offsets import TransactionalOffsets
from ember.ingest.txn_verification import TxnVerifier
from ember.security.authorizer.access import ALLOW_ALL, Access
from ember.security.authorizer.store import AclStore
from ember.security.sasl.scram_admin import ScramAdmin


@dataclass(frozen=True)
class BrokerCore:
    broker_id: int
    cluster_id: str
    config: BrokerConfig
    cache: MetadataCache
    replicas: ReplicaManager
    view: MetadataView
    topics: TopicChanges
    producer_ids: ProducerIdAllocator
    groups: GroupCoordinator
    #: This broker's controller: leadership changes (ElectLeaders, reassignments) run on it when
    #: it is the active one.
    controller: Controller
    #: Users' SCRAM credentials (Describe/AlterUserScramCredentials).
    scram: ScramAdmin
    #: The transactional ids this broker coordinates.
    transactions: TransactionCoordinator
    #: TxnOffsetCommit of the groups this broker coordinates.
    txn_offsets: TransactionalOffsets
    #: Markers for the partitions this broker leads (WriteTxnMarkers).
    txn_markers: LeaderMarkers
    #: The ACL checks (every check passes without ``authorizer.class.name``).
    access: Access = ALLOW_ALL
    #: The ACLs in ZooKeeper (None: no authorizer, so the ACL APIs answer SECURITY_DISABLED).
    acls: AclStore | None = None
    #: Asks transaction coordinators whether a transactional batch's partition is in its
    #: producer's transaction before Produce appends it (None: no verification, tests only).
    txn_verifier: TxnVerifier | None = None
