"""A Kafka-protocol listener: the broker's TCP server loop with Kafka's framing.

It reuses ember's server (one coroutine per connection, requests answered in the order received,
bad frames close only their connection) with Kafka's request decoding and response encoding.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ember.ingest.core import BrokerCore
from ember.ingest.listeners import Listener
from ember.net.budget import RequestBudget
from ember.net.coalescing import CoalescingWriter
from ember.net.server import BrokerServer
from ember.protocol.kafka.api_versions import ApiVersionsHandler
from ember.protocol.kafka.codec import decode_request
from ember.protocol.kafka.dispatcher import KafkaDispatcher
from ember.protocol.kafka.handlers_acls import AclHandlers
from ember.protocol.kafka.handlers_admin import AdminHandlers
from ember.protocol.kafka.handlers_cluster import ClusterHandlers
from ember.protocol.kafka.handlers_configs import ConfigHandlers
from ember.protocol.kafka.handlers_group_admin import GroupAdminHandlers
from ember.protocol.kafka.handlers_groups import GroupHandlers
from ember.protocol.kafka.handlers_leadership import LeadershipHandlers
from ember.protocol.kafka.handlers_records import RecordHandlers
from ember.protocol.kafka.handlers_sasl import SaslHandlers, ScramCredentialHandlers
from ember.protocol.kafka.handlers_sasl import authenticate as authenticate_kafka
from ember.protocol.kafka.handlers_transactions import TransactionHandlers
from ember.security.listener import ListenerSecurity
from ember.wire.reply import FramePieces

if TYPE_CHECKING:
    from ember.metrics.requests import RequestObserver


class KafkaServer(BrokerServer):
    authenticate = staticmethod(authenticate_kafka)   # type: ignore[assignment]
    protocol_name = "Kafka"

    def __init__(self, dispatcher: KafkaDispatcher, host: str, port: int, max_frame_bytes: int,
                 max_idle_ms: int, observer: "RequestObserver | None" = None,
                 security: ListenerSecurity | None = None, budget: RequestBudget | None = None) -> None:
        super().__init__(dispatcher, host, port, max_frame_bytes, max_idle_ms, observer,   # type: ignore[arg-type]
                         security or ListenerSecurity("KAFKA"), budget)
        self.decode_frame = (
            lambda frame: decode_request(memoryview(frame), dispatcher.serves))  # type: ignore[assignment, return-value]
        self.answer_now = dispatcher.answer_now

    async def _write(self, writer: CoalescingWriter, correlation_id: int,  # type: ignore[override]
                     reply: bytes | FramePieces) -> None:
        if isinstance(reply, tuple):    # a fetch's records by reference: large ones go to the socket uncopied
            for piece in reply:
                if writer.transport.is_closing():   # the client went: asyncio would log each further write
                    raise ConnectionResetError("the client closed the connection")
                writer.write(piece)
        else:
            writer.write(reply)
        await writer.drain()


def kafka_dispatcher(core: BrokerCore, listener: str, observer: "RequestObserver | None" = None) -> KafkaDispatcher:
    """Every Kafka API this broker serves on ``listener`` (the name picks the advertised addresses)."""
    dispatcher = KafkaDispatcher(RecordHandlers(core).apis(), ClusterHandlers(core, listener).apis(),
                                 AdminHandlers(core).apis(), GroupHandlers(core, listener).apis(),
                                 GroupAdminHandlers(core).apis(), ConfigHandlers(core).apis(),
                                 LeadershipHandlers(core).apis(), AclHandlers(core).apis(), SaslHandlers().apis(),
                                 ScramCredentialHandlers(core).apis(), TransactionHandlers(core).apis(),
                                 observer=observer)
    dispatcher.apis.update(ApiVersionsHandler(dispatcher.supported).apis())
    return dispatcher


def kafka_server(core: BrokerCore, listener: Listener, max_frame_bytes: int, max_idle_ms: int,
                 observer: "RequestObserver | None" = None, security: ListenerSecurity | None = None,
                 budget: RequestBudget | None = None) -> KafkaServer:
    return KafkaServer(kafka_dispatcher(core, listener.name, observer), listener.host, listener.port, max_frame_bytes,
                       max_idle_ms, observer, security or ListenerSecurity(listener.name), budget)
