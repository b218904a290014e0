"""The API keys both listeners and every client share; numbers follow Kafka's where the API has a
Kafka twin, so one enum names a request on either protocol."""
from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    """API keys; numbers follow Kafka's where the API has a Kafka twin."""
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_TOPIC_PARTITIONS = 75


#: APIs only the Kafka listener serves: ember's own clients have no use for them (every transaction API
#: is on both: the producer's, WRITE_TXN_MARKERS between brokers, and the admin's for ``ember transactions``).
KAFKA_LISTENER_ONLY = frozenset({ApiKey.DESCRIBE_LOG_DIRS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                 ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.DESCRIBE_CLUSTER,
                                 ApiKey.DESCRIBE_TOPIC_PARTITIONS, ApiKey.OFFSET_DELETE})
