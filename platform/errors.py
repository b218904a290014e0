"""Typed errors shared by brokers and clients.

Every failure that crosses the wire is an :class:`ErrorCode`; clients turn the code back into the
matching exception with :func:`error_for_code`, so a user always sees a named error and a hint
about what to do, never a bare number.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Any, Mapping


class ErrorCode(IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_RECORD = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    GROUP_ID_NOT_FOUND = 69
    NON_EMPTY_GROUP = 68
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100
    UNSUPPORTED_ENDPOINT_TYPE = 115
    RESOURCE_NOT_FOUND = 91
    UNACCEPTABLE_CREDENTIAL = 93


class EmberError(Exception):
    """Base class of every ember error. ``retriable`` tells clients whether a retry can help."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False
    hint: str = ""

    def __init__(self, message: str = "") -> None:
        text = message or self.__class__.__doc__ or self.code.name
        if self.hint and self.hint not in text:
            text = f"{text} ({self.hint})"
        super().__init__(text)


class UnknownServerError(EmberError):
    """The broker failed in an unexpected way."""
    hint = "see the broker log"


class OffsetOutOfRange(EmberError):
    """The requested offset is outside the partition's log."""
    code = ErrorCode.OFFSET_OUT_OF_RANGE
    hint = "seek to a valid offset, or set auto_offset_reset to earliest or latest"

    def __init__(self, message: str = "", partitions: Mapping[Any, int] | None = None) -> None:
        super().__init__(message)
        #: {partition: the offset asked for}, where known (kafka-python's OffsetOutOfRangeError
        #: carries the same), so a reader of many partitions knows which one to reposition.
        self.partitions: dict[Any, int] = dict(partitions or {})


class CorruptRecord(EmberError):
    """A record batch failed validation (bad header, length or CRC)."""
    code = ErrorCode.CORRUPT_RECORD


class UnknownTopicOrPartition(EmberError):
    """The topic or partition does not exist on this cluster."""
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True
    hint = "create it with `ember topics create` or check the name"


class LeaderNotAvailable(EmberError):
    """The partition has no leader right now (election in progress or no live in-sync replica)."""
    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True


class NotLeaderOrFollower(EmberError):
    """This broker does not lead the partition; refresh metadata and retry."""
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True


class RequestTimedOut(EmberError):
    """The request did not complete within its timeout."""
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class BrokerNotAvailable(EmberError):
    """No broker could be reached."""
    code = ErrorCode.BROKER_NOT_AVAILABLE
    retriable = True
    hint = "check --bootstrap / bootstrap_servers and that the cluster is up (`ember cluster status`)"


class MessageTooLarge(EmberError):
    """A record batch is larger than the topic's max.message.bytes or the frame limit."""
    code = ErrorCode.MESSAGE_TOO_LARGE
    hint = "raise max.message.bytes on the topic or send smaller records"


class NetworkError(EmberError):
    """The connection to a broker failed."""
    code = ErrorCode.NETWORK_EXCEPTION
    retriable = True


class InvalidTopic(EmberError):
    """The topic name is not valid."""
    code = ErrorCode.INVALID_TOPIC
    hint = "use letters, digits, '.', '_' and '-', at most 249 characters"


class NotEnoughReplicas(EmberError):
    """The in-sync replica set is smaller than min.insync.replicas."""
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppend(EmberError):
    """The record was written by the leader but the ISR shrank before it was replicated."""
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class InvalidRequiredAcks(EmberError):
    """acks must be 0, 1 or all (-1)."""
    code = ErrorCode.INVALID_REQUIRED_ACKS


class IllegalGeneration(EmberError):
    """The consumer group generation is stale; the member must rejoin."""
    code = ErrorCode.ILLEGAL_GENERATION


class UnknownMemberId(EmberError):
    """The group does not know this member; it must rejoin."""
    code = ErrorCode.UNKNOWN_MEMBER_ID


class RebalanceInProgress(EmberError):
    """The group is rebalancing; rejoin and retry."""
    code = ErrorCode.REBALANCE_IN_PROGRESS
    retriable = True


class InconsistentGroupProtocol(EmberError):
    """The member's partition assignors share none with the group's other members (or are unknown)."""
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    hint = "use partition_assignment_strategy names every member supports: range, roundrobin, sticky"


class InvalidGroupId(EmberError):
    """The group id is empty or invalid."""
    code = ErrorCode.INVALID_GROUP_ID


class InvalidSessionTimeout(EmberError):
    """The consumer's session timeout is longer than the broker allows."""
    code = ErrorCode.INVALID_SESSION_TIMEOUT
    hint = "use a session_timeout_ms within the broker's group.max.session.timeout.ms"


class MemberIdRequired(EmberError):
    """Join again with the member id this JoinGroup response carries (Kafka's two-step join: a
    retried first JoinGroup cannot leave a phantom member behind)."""
    code = ErrorCode.MEMBER_ID_REQUIRED
    retriable = True

    def __init__(self, message: str = "", member_id: str = "") -> None:
        super().__init__(message or f"join again with member id {member_id}")
        self.member_id = member_id


class FencedInstanceId(EmberError):
    """Another consumer joined with the same ``group.instance.id`` and replaced this one."""
    code = ErrorCode.FENCED_INSTANCE_ID
    hint = "give every consumer of the group its own group.instance.id"


class GroupSubscribedToTopic(EmberError):
    """A member of the group subscribes to the topic whose committed offsets were to be deleted."""
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    hint = "stop the group's consumers of the topic (or unsubscribe them) first"


class GroupIdNotFound(EmberError):
    """The consumer group does not exist."""
    code = ErrorCode.GROUP_ID_NOT_FOUND


class NonEmptyGroup(EmberError):
    """The group still has active members."""
    code = ErrorCode.NON_EMPTY_GROUP
    hint = "stop the group's consumers first"


class InvalidTimestamp(EmberError):
    """A record timestamp is invalid."""
    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedVersion(EmberError):
    """The broker does not support this API or version."""
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExists(EmberError):
    """A topic with this name already exists."""
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitions(EmberError):
    """The partition count is invalid."""
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactor(EmberError):
    """The replication factor is invalid or larger than the number of live brokers."""
    code = ErrorCode.INVALID_REPLICATION_FACTOR
    hint = "start more brokers or lower --replication-factor"


class InvalidReplicaAssignment(EmberError):
    """A replica list is invalid (empty, repeated or unregistered brokers)."""
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    hint = "list distinct ids of registered brokers (`ember cluster status`)"


class ReassignmentInProgress(EmberError):
    """The partition is already being reassigned."""
    code = ErrorCode.REASSIGNMENT_IN_PROGRESS
    hint = "wait until `ember topics describe` no longer shows it reassigning"


class PreferredLeaderNotAvailable(EmberError):
    """The preferred replica cannot lead now (not registered or not in the ISR)."""
    code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    retriable = True


class ElectionNotNeeded(EmberError):
    """The partition already has the leader the election would give it."""
    code = ErrorCode.ELECTION_NOT_NEEDED


class EligibleLeadersNotAvailable(EmberError):
    """No replica of the partition is alive to lead it, even out of sync (unclean election)."""
    code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    retriable = True
    hint = "start one of the partition's replica brokers"


class NoReassignmentInProgress(EmberError):
    """There is no reassignment of the partition to cancel."""
    code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


class InvalidConfig(EmberError):
    """A configuration name or value is invalid."""
    code = ErrorCode.INVALID_CONFIG


class NotController(EmberError):
    """This broker is not the controller."""
    code = ErrorCode.NOT_CONTROLLER
    retriable = True


class InvalidRequest(EmberError):
    """The request is malformed."""
    code = ErrorCode.INVALID_REQUEST


class InvalidRecord(EmberError):
    """A record batch is well-formed but cannot be accepted (e.g. transactional, or offsets out of order)."""
    code = ErrorCode.INVALID_RECORD


class FetchSessionIdNotFound(EmberError):
    """The fetch session is unknown to the broker (evicted, closed, or the broker restarted)."""
    code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    retriable = True
    hint = "send a full fetch with session id 0"


class InvalidFetchSessionEpoch(EmberError):
    """The fetch's session epoch is not the one the broker expects next (a request was lost or
    sent twice): the broker cannot know what the client holds."""
    code = ErrorCode.INVALID_FETCH_SESSION_EPOCH
    retriable = True
    hint = "send a full fetch with session id 0"


class UnsupportedEndpointType(EmberError):
    """This broker lists brokers only: ember has no separate controller endpoints (no KRaft quorum)."""
    code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    hint = "describe the cluster's brokers; the controller is the broker Metadata names"


class UnknownTopicId(EmberError):
    """No topic has this topic id (it was deleted, or re-created under a new id)."""
    code = ErrorCode.UNKNOWN_TOPIC_ID
    retriable = True
    hint = "refresh metadata"


class OutOfOrderSequenceNumber(EmberError):
    """The broker received a producer sequence number out of order."""
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumber(EmberError):
    """The batch was already written (idempotent producer retry)."""
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpoch(EmberError):
    """The producer has been fenced by a newer instance with the same producer id."""
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class TransactionCoordinatorFenced(EmberError):
    """A transaction coordinator was replaced by a newer one (a higher coordinator epoch) for this
    transactional id: only the newer one may end its transactions."""
    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class InvalidTxnState(EmberError):
    """The transaction is not in a state that allows this request (e.g. EndTxn without an open
    transaction, or a partition that is not in the producer's ongoing transaction)."""
    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerIdMapping(EmberError):
    """The producer id is not the one the coordinator holds for this transactional id."""
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    hint = "call init_transactions() again"


class InvalidTransactionTimeout(EmberError):
    """transaction.timeout.ms is not positive or exceeds the broker's transaction.max.timeout.ms."""
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT
    hint = "lower the producer's transaction.timeout.ms"


class ConcurrentTransactions(EmberError):
    """The previous transaction of this transactional id is still being completed."""
    code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True


class ProducerFenced(EmberError):
    """A newer producer with the same transactional id (a higher epoch) replaced this one, or the
    coordinator aborted its transaction on timeout."""
    code = ErrorCode.PRODUCER_FENCED
    hint = "close this producer; another instance with the same transactional.id took over"


class TransactionalIdNotFound(EmberError):
    """The coordinator has no state for this transactional id."""
    code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


class OperationNotAttempted(EmberError):
    """Not attempted because another part of the same request failed."""
    code = ErrorCode.OPERATION_NOT_ATTEMPTED


class UnstableOffsetCommit(EmberError):
    """The partition's offset is being committed by an open transaction (OffsetFetch with
    require_stable): the answer would be stale."""
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    retriable = True


class UnknownProducerId(EmberError):
    """The broker has no state for this producer id."""
    code = ErrorCode.UNKNOWN_PRODUCER_ID
    retriable = True


class StorageError(EmberError):
    """The broker could not read or write its log directory."""
    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class FencedLeaderEpoch(EmberError):
    """The request carried a leader epoch older than the partition's current one."""
    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True


class UnknownLeaderEpoch(EmberError):
    """The request carried a leader epoch newer than this broker knows."""
    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True


class OffsetNotAvailable(EmberError):
    """The offset is not yet available (for example the high watermark is still catching up)."""
    code = ErrorCode.OFFSET_NOT_AVAILABLE
    retriable = True


class CoordinatorNotAvailable(EmberError):
    """The group coordinator is not available."""
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinator(EmberError):
    """This broker is not the group's coordinator."""
    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class KafkaTimeoutError(EmberError):
    """A client-side operation did not complete in time (buffer full, metadata, delivery)."""
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = False


class SslAuthenticationFailed(EmberError):
    """A TLS connection could not be set up: a plaintext peer on a TLS listener (or the reverse),
    an untrusted certificate, or a missing or refused client certificate. Retrying cannot help."""
    hint = "see docs/security.md"


class SaslAuthenticationFailed(EmberError):
    """SASL authentication failed: unknown user, wrong password, no credentials for the mechanism,
    or a client that did not authenticate on a SASL listener. Retrying cannot help."""
    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    hint = "docs/security.md#sasl"   # not repeated after a message that already points there


class UnsupportedSaslMechanism(SaslAuthenticationFailed):
    """The broker's listener does not enable the SASL mechanism the client asked for."""
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    hint = "set sasl_mechanism to one the listener lists in sasl.enabled.mechanisms"


class IllegalSaslState(EmberError):
    """A SASL request out of order (authenticating before the handshake, or twice)."""
    code = ErrorCode.ILLEGAL_SASL_STATE


class ResourceNotFound(EmberError):
    """The named resource (a user's SCRAM credential) does not exist."""
    code = ErrorCode.RESOURCE_NOT_FOUND


class UnacceptableCredential(EmberError):
    """A SCRAM credential the broker refuses (iterations out of range, empty user name)."""
    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class TopicAuthorizationFailed(EmberError):
    """The client's principal may not do this to the topic (an ACL is missing or denies it)."""
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailed(EmberError):
    """The client's principal may not do this to the consumer group (an ACL is missing or denies it)."""
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailed(EmberError):
    """The client's principal may not do this to the cluster (an ACL is missing or denies it)."""
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class TransactionalIdAuthorizationFailed(EmberError):
    """The client's principal may not use this transactional id (an ACL is missing or denies it)."""
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


class SecurityDisabled(EmberError):
    """The broker has no authorizer, so there are no ACLs to create, list or delete."""
    code = ErrorCode.SECURITY_DISABLED
    hint = "set authorizer.class.name on the brokers (docs/security.md, ## ACLs)"


class CorruptSegment(EmberError):
    """A sealed segment holds damaged bytes; the data at that position cannot be read."""
    # Sent as CORRUPT_RECORD, which is not retriable: retrying a damaged segment never helps.
    code = ErrorCode.CORRUPT_RECORD
    hint = ("read from another in-sync replica (this broker's copy is damaged); do not delete the partition "
            "directory unless another replica holds every acknowledged record (ember topics describe: the ISR)")


class UnexpectedAppendOffset(EmberError):
    """A follower append did not start at the log end offset (the replica fetcher lost track)."""
    hint = "truncate the follower to its log end offset or re-fetch from there"


class IllegalStateError(EmberError):
    """A client call its object's state does not allow (kafka-python's IllegalStateError, Java's
    IllegalStateException): begin_transaction() twice, commit_transaction() without a transaction.
    Client-side only, never on the wire."""


class TransactionAborted(EmberError):
    """The record's transaction was aborted before the record was sent (Kafka's
    TransactionAbortedException). Client-side only, never on the wire."""


def _by_code() -> dict[int, type[EmberError]]:
    table: dict[int, type[EmberError]] = {}
    for cls in EmberError.__subclasses__():
        table.setdefault(int(cls.code), cls)
    return table


_ERRORS_BY_CODE = _by_code()


def error_for_code(code: int, message: str = "") -> EmberError:
    """The exception a client raises for an error code received from a broker."""
    cls = _ERRORS_BY_CODE.get(code, UnknownServerError)
    return cls(message)
