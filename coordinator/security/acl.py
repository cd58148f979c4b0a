"""ACLs and the authorizer's decision, with Kafka's enums, filter semantics and matching rules. Pure: no I/O.

An ACL binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED) plus an entry
(principal, host, operation, permission ALLOW or DENY), exactly as Kafka's `AclBinding`. The codes of every enum are
Kafka's wire codes, so requests and responses carry them unchanged.

Deciding a request (`Authorizer.authorize`), as Kafka's StandardAuthorizer does:

1. a principal listed in `super.users` is allowed everything;
2. the ACLs whose pattern matches the resource are those of the same resource type whose name is equal (LITERAL),
   is `*` (LITERAL wildcard), or is a prefix of the resource name (PREFIXED);
3. of those, an entry applies when its principal is the caller's or `User:*`, its host is the caller's address or
   `*`, and its operation is the one asked for or ALL. An ALLOW entry for READ, WRITE, DELETE or ALTER also
   applies to DESCRIBE, and ALLOW ALTER_CONFIGS to DESCRIBE_CONFIGS; DENY entries imply nothing;
4. any applicable DENY denies (DENY beats ALLOW); else any applicable ALLOW allows; else, if no ACL at all matched
   the resource (whoever it names), `allow.everyone.if.no.acl.found` decides (Kafka's default: deny); else deny.

Filters (DescribeAcls, DeleteAcls) follow Kafka's `AclBindingFilter`: ANY matches every value of an enum, a null
string matches every string; pattern type ANY matches both pattern types but compares names exactly, while MATCH
selects the patterns that would match a resource of that name (equal, wildcard or prefix).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIES_DESCRIBE = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})

# The operations each resource type supports (Kafka's AclEntry.supportedOperations), for authorized_operations.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


class AclError(ValueError):
    """A binding that cannot be created (Kafka answers INVALID_REQUEST with this message)."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """Kafka's checks before creating a binding."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError("Invalid resource type " + self.resource_type.name)
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("Invalid pattern type " + self.pattern_type.name)
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError("Invalid operation " + self.operation.name)
        if self.permission in (Permission.ANY, Permission.UNKNOWN):
            raise AclError("Invalid permission type " + self.permission.name)
        if not self.resource_name:
            raise AclError("Resource name should not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError("The only valid name for the CLUSTER resource is " + CLUSTER_NAME)
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise AclError(
                f"Could not parse principal from `{self.principal}` (no colon is present separating "
                "the principal type from the principal name)"
            )
        if not self.host:
            raise AclError("Host should not be empty")


@dataclasses.dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None strings and ANY enums match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def invalid(self) -> str | None:
        """Why this filter cannot be used, or None (an UNKNOWN enum value is a request Kafka rejects)."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                return f"Invalid filter: {value.__class__.__name__} is UNKNOWN"
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if (
            self.pattern_type not in (PatternType.ANY, PatternType.MATCH)
            and self.pattern_type != acl.pattern_type
        ):
            return False
        if self.resource_name is not None:
            if self.pattern_type in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:  # MATCH
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(acl.resource_name):  # MATCH against a PREFIXED acl
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != Operation.ANY and self.operation != acl.operation:
            return False
        return self.permission == Permission.ANY or self.permission == acl.permission


def parse_principals(text: str | Iterable[str]) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (Kafka's format: `User:alice;User:bob`)."""
    items = text.split(";") if isinstance(text, str) else text
    return frozenset(p.strip() for p in items if p.strip())


def _applies(acl: AclBinding, principal: str, host: str, operation: Operation) -> bool:
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return False
    if acl.host != WILDCARD and acl.host != host:
        return False
    if acl.operation == Operation.ALL or acl.operation == operation:
        return True
    if acl.permission != Permission.ALLOW:
        return False
    if operation == Operation.DESCRIBE:
        return acl.operation in IMPLIES_DESCRIBE
    if operation == Operation.DESCRIBE_CONFIGS:
        return acl.operation in IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    """The ACL set and the decision over it. Mutations come from the security store's replay only."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # (resource type, pattern type) -> name -> bindings; PREFIXED lookups walk the prefixes of the name.
        self._acls: dict[tuple[ResourceType, PatternType], dict[str, set[AclBinding]]] = {}

    # -- the ACL set --------------------------------------------------------------------------------

    def add(self, acl: AclBinding) -> None:
        self._acls.setdefault((acl.resource_type, acl.pattern_type), {}).setdefault(
            acl.resource_name, set()
        ).add(acl)

    def remove(self, acl: AclBinding) -> None:
        by_name = self._acls.get((acl.resource_type, acl.pattern_type), {})
        bindings = by_name.get(acl.resource_name)
        if bindings is not None:
            bindings.discard(acl)
            if not bindings:
                del by_name[acl.resource_name]

    def clear(self) -> None:
        self._acls.clear()

    def __contains__(self, acl: AclBinding) -> bool:
        return acl in self._acls.get((acl.resource_type, acl.pattern_type), {}).get(acl.resource_name, ())

    def acls(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        found = [
            acl
            for by_name in self._acls.values()
            for bindings in by_name.values()
            for acl in bindings
            if acl_filter is None or acl_filter.matches(acl)
        ]
        found.sort()
        return found

    def _matching(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        literal = self._acls.get((resource_type, PatternType.LITERAL), {})
        yield from literal.get(name, ())
        if name != WILDCARD:
            yield from literal.get(WILDCARD, ())
        prefixed = self._acls.get((resource_type, PatternType.PREFIXED))
        if prefixed:
            if len(prefixed) < len(name):
                for prefix, bindings in prefixed.items():
                    if name.startswith(prefix):
                        yield from bindings
            else:
                for end in range(1, len(name) + 1):
                    yield from prefixed.get(name[:end], ())

    # -- decisions ----------------------------------------------------------------------------------

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        any_acl = False
        allowed = False
        for acl in self._matching(resource_type, name):
            any_acl = True
            if _applies(acl, principal, host, operation):
                if acl.permission == Permission.DENY:
                    return False
                allowed = True
        if allowed:
            return True
        return not any_acl and self.allow_everyone_if_no_acl_found

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bitfield of supported operations the caller may perform (DescribeGroups, Metadata)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether the caller may perform `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType, used by InitProducerId without a transactional id): a super user, the
        default rule when there are no ACLs, or an applicable ALLOW on some pattern with no DENY on its name or
        on the wildcard."""
        if principal in self.super_users:
            return True
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allows: list[AclBinding] = []
        seen_any = False
        for (rtype, ptype), by_name in self._acls.items():
            if rtype != resource_type:
                continue
            for bindings in by_name.values():
                for acl in bindings:
                    seen_any = True
                    if acl.principal not in (principal, WILDCARD_PRINCIPAL):
                        continue
                    if acl.host not in (WILDCARD, host):
                        continue
                    if acl.operation not in (operation, Operation.ALL):
                        continue
                    if acl.permission == Permission.DENY:
                        if ptype == PatternType.LITERAL:
                            if acl.resource_name == WILDCARD:
                                return False
                            denied_literal.add(acl.resource_name)
                        else:
                            denied_prefixes.add(acl.resource_name)
                    else:
                        allows.append(acl)
        if not seen_any:
            return self.allow_everyone_if_no_acl_found
        for acl in allows:
            if any(acl.resource_name.startswith(p) for p in denied_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and acl.resource_name in denied_literal:
                continue
            return True
        return False
