"""Broker configuration: Kafka's broker property names, typed and validated.

``BROKER_CONFIGS`` is the table of known broker properties (parsed with ``ember.log``'s
:class:`ConfigDef`, so broker and topic configs share one parser). Several broker properties are
the cluster-wide defaults of topic configs (``log.segment.bytes`` → ``segment.bytes``, ...);
:meth:`BrokerConfig.topic_defaults` maps them, and a topic's overrides apply on top.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from ember.cluster.controller import ControllerConfig
from ember.errors import InvalidConfig
from ember.log.config import TOPIC_CONFIGS, LogConfig
from ember.security.sasl.config import SASL_CONFIGS, listener_setting
from ember.security.tls import SSL_CONFIGS, TlsSettings
from ember.wire.config_def import INT32_MAX, INT64_MAX, ConfigDef, ConfigEntry, ConfigSynonym, read_properties
from ember.zk.zk_session import ZooKeeperTls

log = logging.getLogger(__name__)



def _long(name: str, default: Optional[int], doc: str, minimum: int, **kw: Any) -> ConfigDef:
    return ConfigDef(name, "long", default, doc, minimum=minimum, maximum=INT64_MAX, **kw)


def _int(name: str, default: Optional[int], doc: str, minimum: int, **kw: Any) -> ConfigDef:
    return ConfigDef(name, "int", default, doc, minimum=minimum, maximum=INT32_MAX, **kw)


def _bool(name: str, default: bool, doc: str) -> ConfigDef:
    return ConfigDef(name, "boolean", default, doc)


BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    _int("num.partitions", 1, "Partitions of a topic created without a partition count.", 1),
    _int("default.replication.factor", 1, "Replication factor of a topic created without one.", 1),
    ConfigDef("log.dirs", "string", None, "The broker's log directories, comma-separated (Kafka's JBOD): a new "
              "partition goes to the one holding the fewest; one that fails at start-up is set offline and the "
              "broker serves the others. Unset: log.dir, else the broker's --data directory.", nullable=True),
    ConfigDef("log.dir", "string", None, "The broker's log directory when log.dirs is not set.", nullable=True),
    _long("log.dir.min.free.bytes", 0, "Free space each log directory's file system keeps: an append that would "
          "leave less is refused as a disk failure (the log goes offline, leadership moves, and it comes back once "
          "the space is there), so what shares the file system (ZooKeeper in `ember cluster up`, the broker's "
          "checkpoints) still has room. 0: no check. Not a Kafka setting.", 0),
    _long("log.retention.hours", 168, "Default retention.ms, in hours (used when log.retention.ms "
          "is not set); -1 keeps data forever.", -1),
    _long("log.retention.ms", None, "Default retention.ms; overrides log.retention.hours.", -1,
          nullable=True),
    _long("log.retention.bytes", -1, "Default retention.bytes; -1 = no size limit.", -1),
    _int("log.segment.bytes", 1 << 30, "Default segment.bytes.", 14),
    _long("log.roll.ms", None, "Default segment.ms (7 days when not set).", 1, nullable=True),
    _long("log.retention.check.interval.ms", 300000,
          "How often the broker deletes segments past their topic's retention.", 1),
    _long("log.flush.interval.ms", None, "Default flush.ms (topic default when not set).", 0,
          nullable=True),
    ConfigDef("log.cleanup.policy", "list", "delete", "Default cleanup.policy.", choices=("delete", "compact")),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5, "Default min.cleanable.dirty.ratio.",
              minimum=0.0, maximum=1.0),
    _long("log.cleaner.min.compaction.lag.ms", 0, "Default min.compaction.lag.ms.", 0),
    _long("log.cleaner.max.compaction.lag.ms", INT64_MAX, "Default max.compaction.lag.ms.", 1),
    _long("log.cleaner.delete.retention.ms", 86_400_000, "Default delete.retention.ms.", 0),
    _bool("log.cleaner.enable", True, "Run the log cleaner, which compacts the logs of topics with "
          "cleanup.policy=compact (off: they grow like delete-policy logs without retention)."),
    _int("log.cleaner.threads", 1, "Threads cleaning logs at once (one log per thread).", 1),
    _long("log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024, "Memory a cleaning's key map may use over all "
          "cleaner threads: a dirty section with more keys is cleaned in several passes.", 1024 * 1024),
    _long("log.cleaner.backoff.ms", 15000, "How long the cleaner sleeps when no log needs cleaning.", 0),
    ConfigDef("log.cleaner.io.max.bytes.per.second", "double", float("inf"), "Bytes per second the cleaner reads "
              "and writes at most, all its threads together (throttled in steps of 1 MiB).", minimum=1.0),
    _long("log.flush.scheduler.interval.ms", 1000,
          "How often the broker checks whether a partition's flush.ms has elapsed.", 1),
    _long("log.offline.retry.interval.ms", 5000, "How often the broker retries the logs a disk failure took "
          "offline: each is reopened (and recovered) once the controller has moved its leadership away and a "
          "probe shows its disk works again (not a Kafka setting: Kafka needs a restart).", 100),
    _long("memory.release.interval.ms", 5000, "How often the broker gives the free memory its allocator holds "
          "back to the system (glibc's malloc_trim: what a load's buffers took, freed since); 0: never (not a "
          "Kafka setting).", 0),
    _int("socket.request.max.bytes", 100 * 1024 * 1024,
         "Largest request frame; a bigger one closes the connection.", 1024),
    _long("queued.max.request.bytes", -1, "Bytes of request frames the broker holds at once (read, not yet "
          "answered), summed over its client listeners; the inter-broker listener has a pool of its own. A "
          "connection whose next frame does not fit stops being read until it does (back-pressure, bounded by "
          "connections.max.idle.ms); a frame arriving when nothing else is in flight always fits. -1 = unbounded "
          "(Kafka's default, kept: an acks=all produce holds its bytes until answered, so a bound below the "
          "producers' working set would queue requests behind replication; docs/broker.md).", -1),
    _int("fetch.max.bytes", 57671680, "Most bytes a fetch reads over all its partitions (the request's max_bytes "
         "is capped by it; the first batch is always returned, even a larger one). The Kafka listener converts a "
         "fetch's batches in memory, so this bounds what one Fetch costs there (docs/operations.md).", 1024),
    _long("connections.max.idle.ms", 600000, "A connection that takes longer than this to send the next "
          "request, to send the rest of a started request, or to accept a response is closed.", 1),
    _int("zookeeper.session.timeout.ms", 6000,
         "ZooKeeper session timeout: how long a dead broker stays registered.", 1000),
    _bool("zookeeper.ssl.client.enable", False, "Connect to ZooKeeper over TLS (its secureClientPort)."),
    ConfigDef("zookeeper.ssl.keystore.location", "string", None, "PEM file with this broker's private key and "
              "certificate chain, presented to ZooKeeper (ssl.clientAuth=need).", nullable=True),
    ConfigDef("zookeeper.ssl.keystore.password", "string", None, "Password of that private key.", nullable=True,
              secret=True),
    ConfigDef("zookeeper.ssl.keystore.type", "string", "PEM", "Format of the keystore (PEM only).",
              choices=("PEM",), unsupported=("JKS", "PKCS12")),
    ConfigDef("zookeeper.ssl.truststore.location", "string", None, "PEM file of the CA certificates that sign "
              "ZooKeeper's certificate (unset: the system's).", nullable=True),
    ConfigDef("zookeeper.ssl.truststore.type", "string", "PEM", "Format of the truststore (PEM only).",
              choices=("PEM",), unsupported=("JKS", "PKCS12")),
    _bool("zookeeper.ssl.endpoint.identification.enable", True, "Check that ZooKeeper's certificate names the "
          "host in the connect string."),
    _bool("auto.create.topics.enable", False,
          "Create a topic with default settings when a client asks for an unknown one."),
    _long("replica.lag.time.max.ms", 30000, "A follower that has not caught up for this long "
          "leaves the ISR.", 1),
    _int("max.incremental.fetch.session.cache.slots", 1000, "Fetch sessions (KIP-227) the broker keeps at most: "
         "followers, ember consumers and Kafka clients that ask for one. When full, a new session evicts one idle "
         "for 2 minutes, or a smaller one (a follower's may evict a client's); else the fetch runs without one.", 0),
    _int("replica.fetch.wait.max.ms", 500, "How long a follower fetch waits at the leader for new data.", 0),
    _int("replica.fetch.min.bytes", 1, "Bytes a follower fetch waits for at the leader.", 1),
    _int("replica.fetch.max.bytes", 1048576, "Bytes a follower fetches per partition per request "
         "(at least one batch).", 1),
    _int("replica.fetch.response.max.bytes", 10485760, "Bytes a follower fetches per request "
         "(at least one batch).", 1),
    _int("replica.fetch.backoff.ms", 1000, "Pause of a replica fetcher after a failed fetch.", 0),
    _int("replica.socket.timeout.ms", 30000, "Request timeout of broker-to-broker requests.", 1),
    _int("min.insync.replicas", 1, "Default min.insync.replicas.", 1),
    _int("message.max.bytes", 1048588, "Default max.message.bytes.", 0),
    _bool("unclean.leader.election.enable", False, "Default unclean.leader.election.enable."),
    _bool("auto.leader.rebalance.enable", True, "The controller moves leadership back to preferred replicas "
          "when a broker's leadership imbalance passes leader.imbalance.per.broker.percentage."),
    _long("leader.imbalance.check.interval.seconds", 300, "How often the controller checks leadership "
          "imbalance.", 1),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10, "Share (percent) of a broker's preferred "
              "partitions that may be led elsewhere before the controller moves them back.", minimum=0, maximum=100),
    ConfigDef("metrics.listen", "address", None, "Where the broker serves Prometheus metrics (/metrics) and its "
              "health checks (/livez, /readyz); unset: not served. Keep it on loopback unless a firewall "
              "guards the port.", nullable=True),
    ConfigDef("listeners", "string", None, "Named listeners NAME://HOST:PORT,...: EMBER speaks ember's protocol "
              "(also set by --listen), any other name Kafka's (plaintext).", nullable=True),
    ConfigDef("advertised.listeners", "string", None, "The addresses clients are told, per listener name "
              "(default: listeners).", nullable=True),
    ConfigDef("listener.security.protocol.map", "string", None, "Security protocol per listener, NAME:PROTOCOL,... "
              "with PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; unset: PLAINTEXT (a listener named after a "
              "protocol, e.g. SSL: that protocol).", nullable=True),
    ConfigDef("inter.broker.listener.name", "string", "EMBER", "The listener brokers connect to each other on "
              "(follower fetches); it speaks ember's protocol.", nullable=True),
    *SSL_CONFIGS.values(),
    *SASL_CONFIGS.values(),
    ConfigDef("authorizer.class.name", "string", "", "Turns ACLs on: ember.security.authorizer.AclAuthorizer, or "
              "Kafka's kafka.security.authorizer.AclAuthorizer / org.apache.kafka.metadata.authorizer."
              "StandardAuthorizer (aliases of ember's ZooKeeper-backed authorizer); empty: no authorization.",
              nullable=True),
    ConfigDef("super.users", "string", "", "Principals that may do everything, separated by semicolons "
              "(User:admin;User:CN=ember-broker,O=ember).", nullable=True),
    _bool("allow.everyone.if.no.acl.found", False, "With an authorizer: allow everyone to act on a resource "
          "no ACL mentions."),
    _int("group.initial.rebalance.delay.ms", 3000, "How long the first rebalance of an empty consumer "
         "group waits for more members, so a group starting together rebalances once.", 0),
    _int("group.max.session.timeout.ms", 1800000, "Longest session timeout a consumer group member may "
         "ask for (longer: INVALID_SESSION_TIMEOUT): bounds how long the coordinator keeps a silent member.", 1),
    _int("transaction.max.timeout.ms", 900000, "Longest transaction.timeout.ms a transactional producer may "
         "ask for (longer: INVALID_TRANSACTION_TIMEOUT): bounds how long a transaction can hold back "
         "read_committed consumers.", 1),
    _int("transactional.id.expiration.ms", 604800000, "How long the transaction coordinator keeps a "
         "transactional id whose producer sent nothing transactional (its metadata in ZooKeeper then goes).", 1),
    _int("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000, "How often the transaction "
         "coordinator aborts transactions open past their timeout and expires unused transactional ids.", 1),
)}

#: Broker property -> the topic config it supplies the default of.
_TOPIC_DEFAULTS = {
    "log.retention.bytes": "retention.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.flush.interval.ms": "flush.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "min.insync.replicas": "min.insync.replicas",
    "message.max.bytes": "max.message.bytes",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


#: Topic config -> the broker properties that supply its default, most specific first.
_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    **{topic: (broker,) for broker, topic in _TOPIC_DEFAULTS.items()},
    "retention.ms": ("log.retention.ms", "log.retention.hours"),
}

_LISTENER_PREFIX = "listener.name."


def _field(name: str) -> str:
    return name.replace(".", "_")


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker properties (field = property name with '_' for '.')."""
    num_partitions: int
    default_replication_factor: int
    log_dirs: Optional[str]
    log_dir: Optional[str]
    log_dir_min_free_bytes: int
    log_retention_hours: int
    log_retention_ms: Optional[int]
    log_retention_bytes: int
    log_segment_bytes: int
    log_roll_ms: Optional[int]
    log_retention_check_interval_ms: int
    log_flush_interval_ms: Optional[int]
    log_cleanup_policy: str
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int
    log_cleaner_delete_retention_ms: int
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_backoff_ms: int
    log_cleaner_io_max_bytes_per_second: float
    log_flush_scheduler_interval_ms: int
    log_offline_retry_interval_ms: int
    memory_release_interval_ms: int
    socket_request_max_bytes: int
    queued_max_request_bytes: int
    fetch_max_bytes: int
    max_incremental_fetch_session_cache_slots: int
    connections_max_idle_ms: int
    zookeeper_session_timeout_ms: int
    zookeeper_ssl_client_enable: bool
    zookeeper_ssl_keystore_location: Optional[str]
    zookeeper_ssl_keystore_password: Optional[str] = field(repr=False)
    zookeeper_ssl_keystore_type: str
    zookeeper_ssl_truststore_location: Optional[str]
    zookeeper_ssl_truststore_type: str
    zookeeper_ssl_endpoint_identification_enable: bool
    auto_create_topics_enable: bool
    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    min_insync_replicas: int
    message_max_bytes: int
    unclean_leader_election_enable: bool
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    authorizer_class_name: Optional[str]
    super_users: Optional[str]
    allow_everyone_if_no_acl_found: bool
    group_initial_rebalance_delay_ms: int
    group_max_session_timeout_ms: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    metrics_listen: Optional[tuple[str, int]]
    listeners: Optional[str]
    advertised_listeners: Optional[str]
    listener_security_protocol_map: Optional[str]
    inter_broker_listener_name: Optional[str]
    ssl_keystore_type: str
    ssl_keystore_location: Optional[str]
    ssl_keystore_certificate_chain: Optional[str] = field(repr=False)
    ssl_keystore_key: Optional[str] = field(repr=False)
    ssl_key_password: Optional[str] = field(repr=False)
    ssl_truststore_type: str
    ssl_truststore_location: Optional[str]
    ssl_truststore_certificates: Optional[str] = field(repr=False)
    ssl_client_auth: str
    ssl_enabled_protocols: str
    ssl_cipher_suites: Optional[str]
    ssl_endpoint_identification_algorithm: Optional[str]
    ssl_principal_mapping_rules: str
    ssl_handshake_timeout_ms: int
    sasl_enabled_mechanisms: str
    sasl_mechanism_inter_broker_protocol: str
    sasl_jaas_config: Optional[str] = field(repr=False)
    sasl_handshake_timeout_ms: int
    sasl_server_max_receive_size: int
    connections_max_reauth_ms: int
    connection_failed_authentication_delay_ms: int
    #: ``listener.name.<name>.ssl.*`` and SASL overrides (``sasl.enabled.mechanisms``,
    #: ``connections.max.reauth.ms``, ``<MECHANISM>.sasl.jaas.config``): {LISTENER: {property: value}}; not in
    #: the repr (passwords).
    listener_overrides: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False, repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any] | None = None) -> "BrokerConfig":
        """Defaults overridden by ``properties``; bad values raise InvalidConfig, unknown names
        are logged and ignored (as Kafka does) so one file can serve several versions."""
        values = {_field(name): d.default for name, d in BROKER_CONFIGS.items()}
        overrides: dict[str, dict[str, Any]] = {}
        for name, raw in (properties or {}).items():
            if name.startswith(_LISTENER_PREFIX):
                listener, _, setting = name[len(_LISTENER_PREFIX):].partition(".")
                if listener and setting in SSL_CONFIGS:
                    overrides.setdefault(listener.upper(), {})[setting] = SSL_CONFIGS[setting].parse(raw)
                    continue
                sasl = listener_setting(setting, raw) if listener else None
                if sasl is not None:
                    overrides.setdefault(listener.upper(), {})[sasl[0]] = sasl[1]
                    continue
            definition = BROKER_CONFIGS.get(name)
            if definition is None:
                log.warning("ignoring unknown broker property %r", name)
                continue
            values[_field(name)] = definition.parse(raw)
        config = cls(**values, listener_overrides=overrides)
        if config.connection_failed_authentication_delay_ms >= config.connections_max_idle_ms:   # Kafka's rule
            raise InvalidConfig(f"connection.failed.authentication.delay.ms="
                                f"{config.connection_failed_authentication_delay_ms} should always be less than "
                                f"connections.max.idle.ms={config.connections_max_idle_ms} to prevent failed "
                                f"authentication responses from timing out")
        config.log_config()   # the topic defaults must themselves be valid
        config.log_dir_paths()
        for listener in overrides:
            config.tls_settings(listener)   # and so must every listener's TLS versions
        return config

    @classmethod
    def load(cls, path: Path | None) -> "BrokerConfig":
        return cls.from_properties(read_properties(path) if path else None)

    def get(self, name: str) -> Any:
        return getattr(self, _field(name))

    def zookeeper_tls(self) -> ZooKeeperTls | None:
        """TLS to ZooKeeper (``zookeeper.ssl.*``), None when ``zookeeper.ssl.client.enable`` is false."""
        if not self.zookeeper_ssl_client_enable:
            return None
        return ZooKeeperTls(self.zookeeper_ssl_truststore_location, self.zookeeper_ssl_keystore_location,
                            self.zookeeper_ssl_keystore_password, self.zookeeper_ssl_endpoint_identification_enable)

    def tls_settings(self, listener: str) -> TlsSettings:
        """The ``ssl.*`` settings of ``listener``: its ``listener.name.<name>.ssl.*`` overrides
        over the broker-wide ones."""
        own = self.listener_overrides.get(listener.upper(), {})
        return TlsSettings.from_values(listener.upper(), lambda name: own[name] if name in own else self.get(name))

    def listener_value(self, listener: str, name: str) -> Any:
        """Property ``name`` for ``listener``: its ``listener.name.<name>.`` override, else the
        broker-wide value (None for an override-only key such as ``SCRAM-SHA-256.sasl.jaas.config``)."""
        own = self.listener_overrides.get(listener.upper(), {})
        return own[name] if name in own else (self.get(name) if name in BROKER_CONFIGS else None)

    def log_dir_paths(self) -> tuple[Path, ...]:
        """The log directories ``log.dirs`` (else ``log.dir``) names; empty when neither is set."""
        if self.log_dirs:
            return parse_log_dirs(self.log_dirs, "log.dirs")
        return parse_log_dirs(self.log_dir, "log.dir") if self.log_dir else ()

    def topic_defaults(self) -> dict[str, Any]:
        """Topic config defaults this broker supplies (Kafka names), before topic overrides."""
        defaults = {topic: self.get(broker) for broker, topic in _TOPIC_DEFAULTS.items()
                    if self.get(broker) is not None}
        hours = self.log_retention_hours
        defaults["retention.ms"] = self.log_retention_ms if self.log_retention_ms is not None \
            else (-1 if hours < 0 else hours * 3600 * 1000)
        return defaults

    def log_config(self, overrides: Mapping[str, Any] | None = None) -> LogConfig:
        """The effective config of a topic with these ``overrides``; raises InvalidConfig."""
        return LogConfig.from_properties({**self.topic_defaults(), **(overrides or {})})

    def controller_config(self) -> ControllerConfig:
        """What the controller needs: leader rebalancing settings and each topic's effective
        unclean-election flag (the topic override, else this broker's default)."""
        return ControllerConfig(lambda overrides: self.log_config(overrides).unclean_leader_election_enable,
                                self.auto_leader_rebalance_enable,
                                float(self.leader_imbalance_check_interval_seconds),
                                self.leader_imbalance_per_broker_percentage)

    def describe_topic_config(self, overrides: Mapping[str, str]) -> list[ConfigEntry]:
        """DescribeConfigs entries of a topic with these ``overrides``: every known topic config
        with its effective ``value``, ``default`` (False for an override), ``doc``, ``type``,
        ``source`` ("topic": the topic's override, "broker": a broker property set to other than
        its default supplies it, "default": built in) and ``synonyms``, every setting that
        could supply it, most specific first (Kafka's DescribeConfigs synonyms)."""
        effective = self.log_config(overrides).to_properties()
        entries: list[ConfigEntry] = []
        for name, definition in TOPIC_CONFIGS.items():
            synonyms = [ConfigSynonym(name, str(overrides[name]), "topic")] if name in overrides else []
            broker_names = _BROKER_SYNONYMS.get(name, ())
            synonyms += [ConfigSynonym(b, _text(self.get(b)), "broker") for b in broker_names
                         if self.get(b) != BROKER_CONFIGS[b].default]
            default_name, default = name, definition.default
            if broker_names and BROKER_CONFIGS[broker_names[-1]].default is not None:
                default_name, default = broker_names[-1], BROKER_CONFIGS[broker_names[-1]].default
            synonyms.append(ConfigSynonym(default_name, _text(default), "default"))
            entries.append(ConfigEntry(name, _text(effective[name]), name not in overrides, definition.doc,
                                       definition.type, synonyms[0].source, tuple(synonyms)))
        return entries

    def describe(self) -> list[ConfigEntry]:
        """DescribeConfigs entries of this broker's properties, as :meth:`describe_topic_config`
        (``source`` "broker" for a value other than the default: one set to its default reads as
        a default; ``sensitive``: a password or key, whose value is never sent, as Kafka does).
        They are static: read from the properties file at start."""
        entries: list[ConfigEntry] = []
        for name, definition in BROKER_CONFIGS.items():
            value = self.get(name)
            source = "broker" if value != definition.default else "default"
            shown = None if definition.secret else _text(value)
            entries.append(ConfigEntry(name, shown, source == "default", definition.doc, definition.type, source,
                                       (ConfigSynonym(name, shown, source),), sensitive=definition.secret))
        return entries


def parse_log_dirs(value: str, source: str) -> tuple[Path, ...]:
    """Comma-separated directories (``log.dirs``, ``--log-dirs``), made absolute; each one once."""
    paths = tuple(Path(part.strip()).resolve() for part in value.split(",") if part.strip())
    if not paths:
        raise InvalidConfig(f"{source}={value!r}: expected DIR[,DIR...]")
    if len(set(paths)) != len(paths):
        raise InvalidConfig(f"{source}={value!r} names a directory twice")
    return paths


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):   # an address
        return f"{value[0]}:{value[1]}"
    return str(value)


class TopicConfigPolicy:
    """Checks topic overrides against this broker's defaults (for ``ember.cluster.topic_admin``)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config

    def validate(self, overrides: Mapping[str, str]) -> None:
        self.config.log_config(overrides)

    def is_known(self, name: str) -> bool:
        return name in TOPIC_CONFIGS
