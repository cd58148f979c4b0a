"""ACL matching and filters against Kafka's rules (StandardAuthorizer, AclBindingFilter)."""

from __future__ import annotations

import pytest

from coordinator.security.acl import (
    AclBinding,
    AclError,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(
    rtype: ResourceType,
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    principal: str = ALICE,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: AclBinding, supers: tuple[str, ...] = (), allow_everyone: bool = False) -> Authorizer:
    a = Authorizer(supers, allow_everyone)
    for binding in acls:
        a.add(binding)
    return a


def test_no_acls_denies_by_default_and_allow_everyone_allows() -> None:
    assert not authorizer().authorize(ALICE, HOST, Operation.READ, GROUP, "g")
    assert authorizer(allow_everyone=True).authorize(ALICE, HOST, Operation.READ, GROUP, "g")


def test_allow_everyone_applies_only_when_no_acl_matches_the_resource() -> None:
    # An ACL for bob on the group means the group has ACLs: alice is denied even with allow.everyone.
    a = authorizer(acl(GROUP, "g", Operation.READ, principal=BOB), allow_everyone=True)
    assert not a.authorize(ALICE, HOST, Operation.READ, GROUP, "g")
    assert a.authorize(ALICE, HOST, Operation.READ, GROUP, "other")


def test_super_user_bypasses_deny() -> None:
    a = authorizer(acl(GROUP, "g", Operation.ALL, DENY), supers=(ALICE,))
    assert a.authorize(ALICE, HOST, Operation.DELETE, GROUP, "g")


def test_literal_prefixed_and_wildcard_names() -> None:
    a = authorizer(
        acl(GROUP, "spark-kafka-source-", Operation.READ, pattern=PRE),
        acl(TOPIC, "*", Operation.WRITE),
        acl(GROUP, "exact", Operation.READ),
    )
    assert a.authorize(ALICE, HOST, Operation.READ, GROUP, "spark-kafka-source-1234-driver-0")
    assert a.authorize(ALICE, HOST, Operation.READ, GROUP, "spark-kafka-source-")
    assert not a.authorize(ALICE, HOST, Operation.READ, GROUP, "spark-kafka-sourc")
    assert a.authorize(ALICE, HOST, Operation.READ, GROUP, "exact")
    assert not a.authorize(ALICE, HOST, Operation.READ, GROUP, "exactly")  # literal is not a prefix
    assert a.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "anything")


def test_deny_beats_allow_across_patterns() -> None:
    a = authorizer(
        acl(TOPIC, "orders", Operation.READ, pattern=PRE), acl(TOPIC, "orders-secret", Operation.READ, DENY)
    )
    assert a.authorize(ALICE, HOST, Operation.READ, TOPIC, "orders-public")
    assert not a.authorize(ALICE, HOST, Operation.READ, TOPIC, "orders-secret")
    b = authorizer(acl(TOPIC, "*", Operation.ALL), acl(TOPIC, "t", Operation.ALL, DENY, principal="User:*"))
    assert not b.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "t")


def test_wildcard_principal_and_host() -> None:
    a = authorizer(
        acl(GROUP, "g", Operation.READ, principal="User:*"), acl(GROUP, "h", Operation.READ, host="10.0.0.2")
    )
    assert a.authorize(BOB, HOST, Operation.READ, GROUP, "g")
    assert not a.authorize(ALICE, HOST, Operation.READ, GROUP, "h")
    assert a.authorize(ALICE, "10.0.0.2", Operation.READ, GROUP, "h")


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER])
def test_allow_implies_describe(granted: Operation) -> None:
    a = authorizer(acl(TOPIC, "t", granted))
    assert a.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "t")


def test_implications_are_exactly_kafkas() -> None:
    a = authorizer(acl(TOPIC, "t", Operation.CREATE), acl(TOPIC, "u", Operation.ALTER_CONFIGS))
    assert not a.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "t")  # CREATE does not imply DESCRIBE
    assert a.authorize(ALICE, HOST, Operation.DESCRIBE_CONFIGS, TOPIC, "u")
    assert not a.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "u")
    # READ does not imply WRITE, and a DENY of READ does not deny DESCRIBE.
    b = authorizer(
        acl(TOPIC, "t", Operation.READ),
        acl(TOPIC, "t", Operation.DESCRIBE),
        acl(TOPIC, "t", Operation.READ, DENY),
    )
    assert not b.authorize(ALICE, HOST, Operation.WRITE, TOPIC, "t")
    assert not b.authorize(ALICE, HOST, Operation.READ, TOPIC, "t")
    assert b.authorize(ALICE, HOST, Operation.DESCRIBE, TOPIC, "t")


def test_all_operation_covers_everything_and_deny_all_denies_everything() -> None:
    a = authorizer(acl(GROUP, "g", Operation.ALL))
    for op in (Operation.READ, Operation.DESCRIBE, Operation.DELETE):
        assert a.authorize(ALICE, HOST, op, GROUP, "g")
    a.add(acl(GROUP, "g", Operation.ALL, DENY))
    assert not a.authorize(ALICE, HOST, Operation.DESCRIBE, GROUP, "g")


def test_authorized_operations_bits() -> None:
    a = authorizer(acl(GROUP, "g", Operation.READ))
    bits = a.authorized_operations(ALICE, HOST, GROUP, "g")
    assert bits == (1 << Operation.READ) | (1 << Operation.DESCRIBE)


def test_remove() -> None:
    binding = acl(GROUP, "g", Operation.READ)
    a = authorizer(binding)
    a.remove(binding)
    assert binding not in a
    assert a.acls() == []


def test_filters_any_match_and_exact() -> None:
    lit = acl(TOPIC, "orders", Operation.READ)
    wild = acl(TOPIC, "*", Operation.READ)
    pre = acl(TOPIC, "ord", Operation.READ, pattern=PRE)
    other = acl(GROUP, "orders", Operation.READ, DENY, principal=BOB)
    a = authorizer(lit, wild, pre, other)
    assert set(a.acls(AclFilter())) == {lit, wild, pre, other}
    # ANY pattern type with a name: exact name only.
    assert set(a.acls(AclFilter(resource_name="orders"))) == {lit, other}
    # MATCH: every pattern that would apply to a resource of that name.
    assert set(a.acls(AclFilter(TOPIC, "orders", PatternType.MATCH))) == {lit, wild, pre}
    assert set(a.acls(AclFilter(pattern_type=PRE))) == {pre}
    assert set(a.acls(AclFilter(principal=BOB, permission=DENY))) == {other}
    assert set(a.acls(AclFilter(operation=Operation.WRITE))) == set()
    assert AclFilter(resource_type=ResourceType.UNKNOWN).invalid() is not None


@pytest.mark.parametrize(
    "bad",
    [
        AclBinding(ResourceType.ANY, "t", LIT, ALICE, "*", Operation.READ, ALLOW),
        AclBinding(TOPIC, "t", PatternType.MATCH, ALICE, "*", Operation.READ, ALLOW),
        AclBinding(TOPIC, "t", LIT, ALICE, "*", Operation.ANY, ALLOW),
        AclBinding(TOPIC, "t", LIT, ALICE, "*", Operation.READ, Permission.ANY),
        AclBinding(TOPIC, "t", LIT, "alice", "*", Operation.READ, ALLOW),
        AclBinding(CLUSTER, "c", LIT, ALICE, "*", Operation.ALTER, ALLOW),
        AclBinding(TOPIC, "", LIT, ALICE, "*", Operation.READ, ALLOW),
    ],
)
def test_invalid_bindings(bad: AclBinding) -> None:
    with pytest.raises(AclError):
        bad.validate()


def test_authorize_any_for_idempotent_producers() -> None:
    assert authorizer(acl(TOPIC, "t", Operation.WRITE)).authorize_any(ALICE, HOST, Operation.WRITE, TOPIC)
    assert not authorizer(acl(TOPIC, "t", Operation.READ)).authorize_any(ALICE, HOST, Operation.WRITE, TOPIC)
    denied = authorizer(acl(TOPIC, "t", Operation.WRITE), acl(TOPIC, "*", Operation.WRITE, DENY))
    assert not denied.authorize_any(ALICE, HOST, Operation.WRITE, TOPIC)
