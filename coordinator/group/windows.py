"""Static membership windows (KIP-345's registration and expansion timeouts, which Kafka did not ship): their
timer keys and when they end. What happens when they end is the classic manager's (coordinator.group.manager).

group.static.registration.timeout.ms (0 = off, Kafka's behaviour): when a static member's session expires, it is
marked offline instead of removed. It keeps its place, its instance id and its partitions; it is not waited for
by a join phase nor expected to SyncGroup. When it comes back (a JoinGroup with its instance id and an unknown
member id takes its place back as Kafka's static rejoin does, without a rebalance in a Stable group; a
Heartbeat, SyncGroup, JoinGroup or OffsetCommit under its member id), it is online again. The window is the
group's: it ends when the *earliest member still offline* has been offline this long, and then one rebalance
removes every member offline at that moment — members lost together cost one rebalance. Offline marks are not
durable: after a coordinator restart the sessions start again.

group.expansion.timeout.ms (0 = off): a new member joining a Stable group is held back — its JoinGroup parked,
the member not yet in the group — and the window opens; further joiners are held back too. When the window ends,
one rebalance admits them all; any other rebalance meanwhile admits them at once. The members already in the
group keep heartbeating without REBALANCE_IN_PROGRESS until then. A held-back JoinGroup waits the window plus the
join phase; clients time JoinGroup out after their rebalance timeout plus a margin (the Java client: rebalance
timeout + 5 s), so the window closes no later than half the rebalance timeout of any held-back joiner after it
joined, leaving the other half for the join phase.
"""

from __future__ import annotations

from collections.abc import Iterable


def registration_key(group_id: str) -> str:
    """The end of a group's static registration window: offline static members are removed then."""
    return f"registration-{group_id}"


def expansion_key(group_id: str) -> str:
    """The end of a group's expansion window: the held-back joiners are admitted in one rebalance."""
    return f"expansion-{group_id}"


def registration_end_ms(offline_since_ms: Iterable[int], timeout_ms: int) -> int:
    """When the registration window of members offline since these (monotonic) times ends: `timeout_ms` after
    the earliest of them; with the window off (0), at that earliest time, which has passed."""
    earliest_ms = min(offline_since_ms)
    return earliest_ms + timeout_ms if timeout_ms > 0 else earliest_ms


def expansion_end_ms(opened_ms: int, timeout_ms: int, joiners: Iterable[tuple[int, int]]) -> int:
    """When an expansion window opened at `opened_ms` ends: `timeout_ms` later, or earlier when a held-back
    joiner (joined at, rebalance timeout) would otherwise have less than half its rebalance timeout left."""
    end_ms = opened_ms + timeout_ms
    for joined_at_ms, rebalance_timeout_ms in joiners:
        end_ms = min(end_ms, joined_at_ms + rebalance_timeout_ms // 2)
    return end_ms
