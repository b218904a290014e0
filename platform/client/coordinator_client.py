"""Client side of the coordinator protocol: find a group's (or a transactional id's) coordinator
and send it requests.

The coordinator gets its own connection (not the pooled one partition fetches use): a broker
answers a connection's requests one at a time, so a JoinGroup waiting for a rebalance would
otherwise hold up fetches, and a long-poll fetch would delay heartbeats. NotCoordinator,
CoordinatorNotAvailable and network errors make the client look the coordinator up again and
retry until the request's deadline.
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Collection, Optional

from ember.client.metadata import MetadataClient
from ember.errors import BrokerNotAvailable, CoordinatorNotAvailable, ErrorCode, KafkaTimeoutError, NetworkError, RequestTimedOut
from ember.net.channel import Address
from ember.net.connection import ConnectionPool
from ember.wire.api_keys import ApiKey
from ember.wire.frame import Response, response_error

# The answer to a first JoinGroup, which carries the member id to join with (read from the body).
MEMBER_ID_REQUIRED = ErrorCode.MEMBER_ID_REQUIRED
_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
#: FindCoordinator's key types (Kafka's).
GROUP_KEY, TRANSACTION_KEY = 0, 1


class CoordinatorClient:
    def __init__(self, metadata: MetadataClient, group_id: str, request_timeout_s: float,
                 key_type: int = GROUP_KEY) -> None:
        """``group_id``: the coordinator's key, a transactional id with ``key_type=TRANSACTION_KEY``."""
        self.metadata = metadata
        self.group_id = group_id
        self.key_type = key_type
        self._kind = "group" if key_type == GROUP_KEY else "transactional id"
        self.request_timeout_s = request_timeout_s
        self._pool = ConnectionPool(request_timeout_ms=int(request_timeout_s * 1000), security=metadata.security)
        self._address: Optional[Address] = None

    def coordinator(self) -> Address:
        """The coordinator's address, asking any broker (FindCoordinator) when not known."""
        if self._address is None:
            query: dict[str, Any] = {"key": self.group_id}
            if self.key_type != GROUP_KEY:
                query["key_type"] = self.key_type
            body = self.metadata.request(ApiKey.FIND_COORDINATOR, query).body
            error = response_error(body)
            if error is not None:
                raise error
            self._address = (body["host"], int(body["port"]))
        return self._address

    def send(self, api_key: int, body: dict[str, Any], timeout_s: Optional[float] = None) -> Future[Response]:
        """Send once to the coordinator; the future holds the response (errors not raised)."""
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        return self._pool.get(self.coordinator()).request(api_key, body, timeout_s=timeout)

    def request(self, api_key: int, body: dict[str, Any], timeout_s: Optional[float] = None,
                deadline_s: Optional[float] = None, accept: Collection[int] = ()) -> dict[str, Any]:
        """Send to the coordinator and return the response body, raising its error (except the
        codes in ``accept``: those bodies are returned); retries while the coordinator moves or is
        unreachable, until ``deadline_s`` (default: one timeout). Raises KafkaTimeoutError when
        the coordinator never answered in time, CoordinatorNotAvailable when none was found."""
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + (timeout if deadline_s is None else deadline_s)
        while True:
            try:
                response = self.send(api_key, body, timeout).result(timeout + 1.0)
                error = response_error(response.body)
                if error is None or response.body.get("error_code") in accept:
                    return response.body
                if error.code not in _MOVED:
                    raise error
            except (BrokerNotAvailable, NetworkError, RequestTimedOut, CoordinatorNotAvailable) as exc:
                error = exc
            except FutureTimeout:
                error = KafkaTimeoutError(f"no answer from the coordinator of {self.group_id!r} in {timeout:.1f}s")
            self._address = None
            if time.monotonic() + self.metadata.retry_backoff_s >= deadline:
                if isinstance(error, (KafkaTimeoutError, RequestTimedOut)):
                    raise KafkaTimeoutError(f"the coordinator of {self._kind} {self.group_id!r} did not answer "
                                            f"in time ({error})")
                raise CoordinatorNotAvailable(f"no coordinator of {self._kind} {self.group_id!r} answered "
                                              f"({type(error).__name__}: {error})")
            time.sleep(self.metadata.retry_backoff_s)

    def forget(self) -> None:
        """Look the coordinator up again before the next request."""
        self._address = None

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "CoordinatorClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

