"""ZooKeeper paths of the cluster metadata (all below the chroot :data:`CHROOT`).

One place names every znode, so brokers, the controller and tools agree on the layout
documented in docs/broker.md.
"""
from __future__ import annotations

from urllib.parse import quote, unquote

CHROOT = "/ember"

BROKER_IDS = "/brokers/ids"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPICS = "/topics"
PRODUCER_ID_BLOCK = "/producer_id_block"
#: Created once per cluster; brokers refuse data directories of another cluster.
CLUSTER_ID = "/cluster/id"


def broker(broker_id: int) -> str:
    """Ephemeral registration of a live broker."""
    return f"{BROKER_IDS}/{broker_id}"


#: Persistent, one znode per broker while it has replicas whose log a disk failure took offline.
OFFLINE_REPLICAS = "/brokers/offline_replicas"


def offline_replicas(broker_id: int) -> str:
    """A broker's offline replicas: ``{"version": 1, "broker": id, "partitions": [{"topic",
    "partition", "topic_id"}]}``; absent while it has none."""
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def topic(name: str) -> str:
    """Persistent topic node: topic id, replica assignment and config overrides."""
    return f"{TOPICS}/{name}"


def partitions(name: str) -> str:
    return f"{topic(name)}/partitions"


def partition(name: str, index: int) -> str:
    return f"{partitions(name)}/{index}"


def partition_state(name: str, index: int) -> str:
    """Leader, leader epoch, ISR and controller epoch; always written by compare-and-set."""
    return f"{partition(name, index)}/state"


GROUPS = "/groups"


def group(group_id: str) -> str:
    """Persistent consumer-group node: protocol, generation and the last assignment (JSON)."""
    return f"{GROUPS}/{group_id}"


def group_offsets(group_id: str) -> str:
    return f"{group(group_id)}/offsets"


def group_offset(group_id: str, topic_name: str, index: int) -> str:
    """A committed offset: ``{offset, metadata, commit_timestamp}`` (the seeds' layout)."""
    return f"{group_offsets(group_id)}/{topic_name}/{index}"


def group_pending_offsets(group_id: str) -> str:
    """Offsets of the group committed inside open transactions (TxnOffsetCommit)."""
    return f"{group(group_id)}/pending_txn_offsets"


def group_pending_offset(group_id: str, transactional_id: str) -> str:
    """The group's offsets pending in one transaction, ``{"<topic>": {"<p>": [offset, metadata]}}``:
    committed to the group when the transaction commits, dropped when it aborts; while there,
    OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for those partitions."""
    return f"{group_pending_offsets(group_id)}/{quote(transactional_id, safe='')}"


#: SCRAM credentials, one znode per user, Kafka's layout:
#: ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}``.
CONFIG_USERS = "/config/users"


#: Random bytes made once per cluster: they key the made-up SCRAM salts of users that do not exist.
SCRAM_DECOY_KEY = "/config/scram_decoy_key"


def user(name: str) -> str:
    """A user's znode; the name URL-encoded as Kafka's Sanitizer does (a name may hold ``/``)."""
    return f"{CONFIG_USERS}/{quote(name, safe='')}"


def user_name(node: str) -> str:
    return unquote(node)


TRANSACTIONS = "/transactions"


def transaction(transactional_id: str) -> str:
    """A transactional id's transaction metadata (JSON, written by compare-and-set); the id
    URL-encoded as a path segment (a transactional id may hold ``/``)."""
    return f"{TRANSACTIONS}/{quote(transactional_id, safe='')}"


def transactional_id(node: str) -> str:
    return unquote(node)
