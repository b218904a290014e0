"""CreateAcls, DescribeAcls and DeleteAcls as a broker serves them, for both wire protocols: Kafka's
rules (Alter on the cluster to change ACLs, Describe on the cluster to list them; SECURITY_DISABLED
without an authorizer). The ZooKeeper writes run on a thread; each waits (bounded) until this
broker's own cache shows the change, so a client that adds an ACL and then acts on this broker
sees it in force."""
from __future__ import annotations

import asyncio
from typing import Optional, Sequence

from ember.errors import SecurityDisabled
from ember.security.authorizer.access import Access
from ember.security.authorizer.model import AclBinding, AclBindingFilter, Operation
from ember.security.authorizer.store import AclStore


class AclAdmin:
    def __init__(self, access: Access, store: Optional[AclStore]) -> None:
        self.access = access
        self.store = store

    def _store(self, operation: Operation) -> AclStore:
        if self.store is None:
            raise SecurityDisabled("this broker has no authorizer (authorizer.class.name is not set)")
        self.access.check_cluster(operation)
        return self.store

    async def create(self, bindings: Sequence[AclBinding]) -> list[Optional[Exception]]:
        """Per binding: None once stored, else why not (every binding is refused alike when the
        principal may not Alter the cluster)."""
        try:
            store = self._store(Operation.ALTER)
        except Exception as exc:
            return [exc for _ in bindings]
        results: list[Optional[Exception]] = []
        for binding in bindings:
            try:
                binding.validate()
                await asyncio.to_thread(store.add, [binding])
                results.append(None)
            except Exception as exc:
                results.append(exc)
        return results

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return self._store(Operation.DESCRIBE).bindings(acl_filter)

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | Exception]:
        """Per filter: the ACLs it deleted, or why it could not."""
        try:
            store = self._store(Operation.ALTER)
        except Exception as exc:
            return [exc for _ in filters]
        results: list[list[AclBinding] | Exception] = []
        for acl_filter in filters:
            try:
                results.append(await asyncio.to_thread(store.remove, acl_filter))
            except Exception as exc:
                results.append(exc)
        return results
