"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs over Kafka's protocol: translation only.

Topic configs are the broker core's (``TopicChanges``: the same describe and alter the ember
protocol serves), with Kafka's config sources and synonyms. A broker's own configs are described
read-only: ember's broker properties are static (read from the properties file at start), so
setting one is refused with INVALID_REQUEST, as Kafka refuses a non-dynamic config, while
deleting one is a no-op (there is no dynamic value to delete; ``kafka-reassign-partitions
--verify`` clears replication throttles that way).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from ember.errors import InvalidConfig, InvalidRequest
from ember.ingest.core import BrokerCore
from ember.ingest.topic_changes import DEFAULT_TIMEOUT_MS
from ember.log.config import TOPIC_CONFIGS
from ember.protocol.kafka.codec import KafkaRequest, build, response_class
from ember.protocol.kafka.dispatcher import Api
from ember.security.authorizer.model import Operation
from ember.wire.api_keys import ApiKey
from ember.wire.config_def import ConfigEntry
from ember.wire.reply import OK, error_fields

#: Kafka's ConfigResource types
TOPIC, BROKER = 2, 4
#: Kafka's ConfigSource of each of the core's sources
SOURCES = {"topic": 1, "broker": 4, "default": 5}   # DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG
#: Kafka's ConfigType of each ConfigDef type (DescribeConfigs v3+)
_TYPES = {"boolean": 1, "string": 2, "address": 2, "int": 3, "long": 5, "double": 6, "list": 7}
#: IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def kafka_config(entry: ConfigEntry, read_only: bool, synonyms: bool, documentation: bool) -> dict[str, Any]:
    """One DescribeConfigs (and CreateTopics v5+) config entry from the core's description."""
    return {"name": entry.name, "value": entry.value, "read_only": read_only, "is_sensitive": entry.sensitive,
            "config_source": SOURCES[entry.source],
            "synonyms": [{"name": s.name, "value": s.value, "source": SOURCES[s.source]} for s in entry.synonyms]
            if synonyms else [],
            "config_type": _TYPES.get(entry.type, 0), "documentation": entry.doc if documentation else None}


class ConfigHandlers:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def apis(self) -> dict[int, Api]:
        return {ApiKey.DESCRIBE_CONFIGS: Api(1, 4, self.describe_configs),
                ApiKey.ALTER_CONFIGS: Api(0, 2, self.alter_configs),
                ApiKey.INCREMENTAL_ALTER_CONFIGS: Api(0, 1, self.incremental_alter_configs)}

    async def describe_configs(self, request: KafkaRequest) -> Any:
        body = request.body
        documentation = getattr(body, "include_documentation", False)
        results = []
        for resource in body.resources:
            result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
            try:
                if resource.resource_type == TOPIC:
                    entries, read_only = self.core.topics.describe_config(resource.resource_name), False
                else:
                    entries, read_only = self._broker_configs(resource.resource_type, resource.resource_name), True
                keys = set(resource.configuration_keys or ())
                results.append({**OK, **result, "configs": [
                    kafka_config(e, read_only, body.include_synonyms, documentation)
                    for e in entries if not keys or e.name in keys]})
            except Exception as exc:
                results.append({**error_fields(exc), **result, "configs": []})
        return build(response_class(ApiKey.DESCRIBE_CONFIGS, request.api_version), {"results": results})

    def _broker_configs(self, resource_type: int, name: str) -> list[ConfigEntry]:
        """This broker's config entries; "" (the cluster-wide dynamic defaults) has none."""
        self._check_broker(resource_type, name)
        self.core.access.check_cluster(Operation.DESCRIBE_CONFIGS)
        return self.core.config.describe() if name else []

    def _check_broker(self, resource_type: int, name: str) -> None:
        if resource_type != BROKER:
            raise InvalidRequest(f"config resource type {resource_type} is not supported; ember has topic (2) "
                                 f"and broker (4) configs")
        if name not in ("", str(self.core.broker_id)):
            raise InvalidRequest(f"this is broker {self.core.broker_id}: send requests about broker {name[:50]!r}'s "
                                 f"configs to that broker")

    async def alter_configs(self, request: KafkaRequest) -> Any:
        """Legacy AlterConfigs: a topic's overrides become exactly the configs given."""
        def change(resource: Any) -> tuple[dict[str, str], list[str]]:
            given = {c.name: c.value for c in resource.configs if c.value is not None}
            meta = self.core.cache.topic(resource.resource_name) if resource.resource_type == TOPIC else None
            return given, [name for name in (meta.record.config if meta else ()) if name not in given]
        responses = await self._alter(request, change)
        return build(response_class(ApiKey.ALTER_CONFIGS, request.api_version), {"responses": responses})

    async def incremental_alter_configs(self, request: KafkaRequest) -> Any:
        responses = await self._alter(request, self._operations)
        return build(response_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.api_version), {"responses": responses})

    async def _alter(self, request: KafkaRequest,
                     change: Callable[[Any], tuple[dict[str, str], list[str]]]) -> list[dict[str, Any]]:
        """Apply ``change(resource)`` (configs to set, configs to delete) to each topic resource;
        broker resources only accept deletes, which change nothing."""
        body = request.body
        repeated = Counter((r.resource_type, r.resource_name) for r in body.resources)
        responses = []
        for resource in body.resources:
            result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
            try:
                if repeated[(resource.resource_type, resource.resource_name)] > 1:
                    raise InvalidRequest(f"resource {resource.resource_name[:100]!r} is listed more than once")
                twice = [n for n, count in Counter(c.name for c in resource.configs).items() if count > 1]
                if twice:
                    raise InvalidRequest(f"config(s) {', '.join(sorted(twice))[:300]} listed more than once")
                updates, deletes = change(resource)
                if resource.resource_type == TOPIC:
                    # Kafka drops a deleted name it does not know: nothing can have set it
                    await self.core.topics.alter_config(resource.resource_name, updates,
                                                        [n for n in deletes if n in TOPIC_CONFIGS],
                                                        body.validate_only, DEFAULT_TIMEOUT_MS / 1000)
                else:
                    self._check_broker(resource.resource_type, resource.resource_name)
                    self.core.access.check_cluster(Operation.ALTER_CONFIGS)
                    if updates:
                        raise InvalidRequest(f"broker configs are static in ember: set {', '.join(sorted(updates))[:300]}"
                                             f" in the broker's properties file and restart it")
                responses.append({**OK, **result})
            except Exception as exc:
                responses.append({**error_fields(exc), **result})
        return responses

    def _operations(self, resource: Any) -> tuple[dict[str, str], list[str]]:
        """IncrementalAlterConfigs' operations as (configs to set, configs to delete); APPEND and
        SUBTRACT add items to or remove them from a list config's effective value."""
        updates, deletes = {}, []
        for config in resource.configs:
            if config.config_operation == SET:
                if config.value is None:
                    raise InvalidRequest(f"SET of {config.name[:100]!r} has no value")
                updates[config.name] = config.value
            elif config.config_operation == DELETE:
                deletes.append(config.name)
            elif config.config_operation in (APPEND, SUBTRACT):
                updates[config.name] = self._list_operation(resource, config)
            else:
                raise InvalidRequest(f"config operation {config.config_operation} is unknown (0 SET, 1 DELETE, "
                                     f"2 APPEND, 3 SUBTRACT)")
        return updates, deletes

    def _list_operation(self, resource: Any, config: Any) -> str:
        definition = TOPIC_CONFIGS.get(config.name) if resource.resource_type == TOPIC else None
        if definition is None or definition.type != "list":
            lists = ", ".join(n for n, d in TOPIC_CONFIGS.items() if d.type == "list")
            raise InvalidConfig(f"{config.name[:100]!r} is not a list config: APPEND and SUBTRACT apply to the "
                                f"list-valued topic configs ({lists}); use SET")
        current = next(e.value for e in self.core.topics.describe_config(resource.resource_name)
                       if e.name == config.name) or ""
        items = [i for i in current.split(",") if i]
        given = [i.strip() for i in (config.value or "").split(",") if i.strip()]
        if config.config_operation == APPEND:
            return ",".join(items + [i for i in given if i not in items])
        return ",".join(i for i in items if i not in given)
