"""The ACL APIs (DescribeAcls 29, CreateAcls 30, DeleteAcls 31, v1-3; kio, like Kafka 4, has no v0) and the SCRAM
credential APIs (DescribeUserScramCredentials 50, AlterUserScramCredentials 51, v0), as Kafka's AdminClient and
tools use them.

Authorization as in Kafka: DescribeAcls needs CLUSTER DESCRIBE, CreateAcls and DeleteAcls CLUSTER ALTER (else
CLUSTER_AUTHORIZATION_FAILED); without an authorizer the ACL APIs answer SECURITY_DISABLED. The SCRAM APIs need
CLUSTER DESCRIBE / ALTER when an authorizer is configured. Validation and messages follow Kafka's (AclControlManager, ScramControlManager): an
invalid binding is INVALID_REQUEST with the reason, an alteration naming a user twice for one mechanism is
DUPLICATE_RESOURCE, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384 or an empty
name, salt or salted password UNACCEPTABLE_CREDENTIAL, and deleting or describing a missing credential
RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from protocol.api import ApiTable, RequestContext
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from .acl import (
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from .scram import MAX_ITERATIONS, MECHANISM_CODES, MECHANISM_NAMES, MIN_ITERATIONS, ScramCredential
from .store import SecurityStore

NO_AUTHORIZER = "No Authorizer is configured on the broker"
CLUSTER_DENIED = "Cluster authorization failed."


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(int(value))
    except ValueError:
        return cls(0)  # UNKNOWN


# api key -> (min version, max version) of the ACL and SCRAM APIs served here.
VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}


class SecurityApis:
    def __init__(self, store: SecurityStore, enabled: bool, on_denied: Any = None) -> None:
        self.store = store
        self.enabled = enabled  # an authorizer is configured
        self._on_denied = on_denied

    def register(self, table: ApiTable) -> None:
        handlers = {
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_scram,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_scram,
        }
        for api_key, (low, high) in VERSIONS.items():
            table.register(api_key, low, high, handlers[api_key])

    def _cluster(self, ctx: RequestContext, op: Operation) -> bool:
        if not self.enabled:
            return True
        ok = self.store.authorizer.authorize(
            ctx.principal, ctx.client_host, op, ResourceType.CLUSTER, CLUSTER_NAME
        )
        if not ok and self._on_denied is not None:
            self._on_denied(ctx.api_key, op.name)
        return ok

    # -- ACLs ---------------------------------------------------------------------------------------

    @staticmethod
    def _filter(ctx: RequestContext, f: Any) -> AclFilter:
        pattern = _enum(PatternType, f.pattern_type_filter) if ctx.api_version >= 1 else PatternType.LITERAL
        return AclFilter(
            _enum(ResourceType, f.resource_type_filter),
            f.resource_name_filter,
            pattern,
            f.principal_filter,
            f.host_filter,
            _enum(Operation, f.operation),
            _enum(Permission, f.permission_type),
        )

    async def describe_acls(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        base = {"throttle_time": 0, "resources": ()}
        if not self.enabled:
            return base | {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
        if not self._cluster(ctx, Operation.DESCRIBE):
            return base | {
                "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": CLUSTER_DENIED,
            }
        acl_filter = self._filter(ctx, req)
        invalid = acl_filter.invalid()
        if invalid is not None:
            return base | {"error_code": ErrorCode.invalid_request, "error_message": invalid}
        resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
        for acl in self.store.authorizer.acls(acl_filter):
            resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
                {
                    "principal": acl.principal,
                    "host": acl.host,
                    "operation": int(acl.operation),
                    "permission_type": int(acl.permission),
                }
            )
        return base | {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resources": [
                {"resource_type": int(rt), "resource_name": name, "pattern_type": int(pt), "acls": acls}
                for (rt, name, pt), acls in resources.items()
            ],
        }

    async def create_acls(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        if not self.enabled:
            return {
                "throttle_time": 0,
                "results": [
                    {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER}
                    for _ in req.creations
                ],
            }
        if not self._cluster(ctx, Operation.ALTER):
            return {
                "throttle_time": 0,
                "results": [
                    {"error_code": ErrorCode.cluster_authorization_failed, "error_message": CLUSTER_DENIED}
                    for _ in req.creations
                ],
            }
        results: list[dict[str, Any]] = []
        records = []
        for c in req.creations:
            pattern = (
                _enum(PatternType, c.resource_pattern_type) if ctx.api_version >= 1 else PatternType.LITERAL
            )
            acl = AclBinding(
                _enum(ResourceType, c.resource_type),
                c.resource_name,
                pattern,
                c.principal,
                c.host,
                _enum(Operation, c.operation),
                _enum(Permission, c.permission_type),
            )
            try:
                acl.validate()
            except AclError as exc:
                results.append({"error_code": ErrorCode.invalid_request, "error_message": str(exc)})
                continue
            if acl not in self.store.authorizer:
                records.append(self.store.acl_record(acl, True))
            results.append({"error_code": ErrorCode.none, "error_message": None})
        await self.store.write(records)
        return {"throttle_time": 0, "results": results}

    async def delete_acls(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        def all_failed(code: ErrorCode, message: str) -> dict[str, Any]:
            return {
                "throttle_time": 0,
                "filter_results": [
                    {"error_code": code, "error_message": message, "matching_acls": ()} for _ in req.filters
                ],
            }

        if not self.enabled:
            return all_failed(ErrorCode.security_disabled, NO_AUTHORIZER)
        if not self._cluster(ctx, Operation.ALTER):
            return all_failed(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
        results: list[dict[str, Any]] = []
        doomed: dict[AclBinding, None] = {}
        for f in req.filters:
            acl_filter = self._filter(ctx, f)
            invalid = acl_filter.invalid()
            if invalid is not None:
                results.append(
                    {"error_code": ErrorCode.invalid_request, "error_message": invalid, "matching_acls": ()}
                )
                continue
            matched = self.store.authorizer.acls(acl_filter)
            doomed.update(dict.fromkeys(matched))
            results.append(
                {
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "matching_acls": [
                        {
                            "error_code": ErrorCode.none,
                            "error_message": None,
                            "resource_type": int(a.resource_type),
                            "resource_name": a.resource_name,
                            "pattern_type": int(a.pattern_type),
                            "principal": a.principal,
                            "host": a.host,
                            "operation": int(a.operation),
                            "permission_type": int(a.permission),
                        }
                        for a in matched
                    ],
                }
            )
        await self.store.write(self.store.acl_record(acl, False) for acl in doomed)
        return {"throttle_time": 0, "filter_results": results}

    # -- SCRAM credentials --------------------------------------------------------------------------

    async def describe_scram(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        if not self._cluster(ctx, Operation.DESCRIBE):
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": CLUSTER_DENIED,
                "results": (),
            }
        users = self.store.users()
        wanted = [u.name for u in req.users] if req.users else list(users)
        counts = Counter(wanted)
        results = []
        for name in dict.fromkeys(wanted):
            if counts[name] > 1:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.duplicate_resource,
                        "error_message": f"Cannot describe SCRAM credentials for the same user twice in a single request: "
                        f"{name}",
                        "credential_infos": (),
                    }
                )
            elif name not in users:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.resource_not_found,
                        "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                        "credential_infos": (),
                    }
                )
            else:
                results.append(
                    {
                        "user": name,
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "credential_infos": [
                            {"mechanism": MECHANISM_CODES[c.mechanism], "iterations": c.iterations}
                            for c in users[name]
                        ],
                    }
                )
        return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": results}

    async def alter_scram(self, ctx: RequestContext, req: Any) -> dict[str, Any]:
        names = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
        if not self._cluster(ctx, Operation.ALTER):
            return {
                "throttle_time": 0,
                "results": [
                    {
                        "user": n,
                        "error_code": ErrorCode.cluster_authorization_failed,
                        "error_message": CLUSTER_DENIED,
                    }
                    for n in names
                ],
            }
        per_mechanism = Counter(
            [(d.name, int(d.mechanism)) for d in req.deletions]
            + [(u.name, int(u.mechanism)) for u in req.upsertions]
        )
        errors: dict[str, tuple[ErrorCode, str]] = {}

        def fail(user: str, code: ErrorCode, message: str) -> None:
            errors.setdefault(user, (code, message))

        for (user, _), count in per_mechanism.items():
            if count > 1:
                fail(
                    user,
                    ErrorCode.duplicate_resource,
                    "A user credential cannot be altered twice in the same request",
                )
        records = []
        for d in req.deletions:
            mechanism = MECHANISM_NAMES.get(int(d.mechanism))
            if not d.name:
                fail(d.name, ErrorCode.unacceptable_credential, "Username must not be empty")
            elif mechanism is None:
                fail(d.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
            elif self.store.credential(mechanism, d.name) is None:
                fail(
                    d.name,
                    ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist",
                )
            else:
                records.append((d.name, self.store.credential_record(d.name, mechanism, None)))
        for u in req.upsertions:
            mechanism = MECHANISM_NAMES.get(int(u.mechanism))
            if not u.name:
                fail(u.name, ErrorCode.unacceptable_credential, "Username must not be empty")
            elif mechanism is None:
                fail(u.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
            elif u.iterations < MIN_ITERATIONS:
                fail(u.name, ErrorCode.unacceptable_credential, "Too few iterations")
            elif u.iterations > MAX_ITERATIONS:
                fail(u.name, ErrorCode.unacceptable_credential, "Too many iterations")
            elif not u.salt or not u.salted_password:
                fail(u.name, ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
            else:
                credential = ScramCredential.from_salted_password(
                    mechanism, bytes(u.salt), int(u.iterations), bytes(u.salted_password)
                )
                records.append((u.name, self.store.credential_record(u.name, mechanism, credential)))
        await self.store.write(record for user, record in records if user not in errors)
        return {
            "throttle_time": 0,
            "results": [
                {
                    "user": n,
                    "error_code": errors[n][0] if n in errors else ErrorCode.none,
                    "error_message": errors[n][1] if n in errors else None,
                }
                for n in names
            ],
        }
