"""Domain errors of Strongroom and the one table that maps them to gRPC.

Domain code raises these; only the servicer boundary (`strongroom.grpcerrors`) turns them into
gRPC statuses with a `google.rpc.ErrorInfo` reason, and the client rebuilds them from the
reason with `error_for_reason`.

Longer than 600 lines: it is the one error table; every error sits in it so that the registry
the client rebuilds errors from is made from one module and cannot miss one.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "StrongroomError",
    "NotLeaderError",
    "NoLeaderError",
    "NoQuorumError",
    "StaleEpochError",
    "StoreLimitExceeded",
    "MessageTooLarge",
    "UnknownDestination",
    "UnknownDurableKind",
    "UnknownMessage",
    "ForeignMessage",
    "InvalidArgument",
    "SequenceOutsideWindow",
    "InvalidOrigin",
    "OriginGap",
    "RealmInvalid",
    "RealmVersionConflict",
    "RealmVersionNotFound",
    "UnknownMember",
    "DataCorruption",
    "StoreDriverMismatch",
    "MigrationRefused",
    "PersistenceUnavailable",
    "NotOperational",
    "NoNewUow",
    "StoreStateError",
    "SubscriptionClosed",
    "SubscriptionReplaced",
    "DurableUnreachable",
    "DurableDeleted",
    "DurableMismatch",
    "UnknownDurable",
    "LogFormatPending",
    "InvalidMatcher",
    "MapsNotAllowed",
    "UnknownStore",
    "KeyNotFound",
    "VersionMismatch",
    "KeyExists",
    "ConnectionFailed",
    "RpcFailed",
    "UnknownUow",
    "UowStateError",
    "UowNotHeld",
    "UowAborted",
    "UowExists",
    "NotSubscribed",
    "NotActiveRouter",
    "StandbyRefusal",
    "Fenced",
    "UnknownCluster",
    "PrimaryHealthy",
    "WrongDrRole",
    "NotStandby",
    "LogDiverged",
    "PermissionDenied",
    "Unauthenticated",
    "UnknownToken",
    "error_for_reason",
    "ERROR_DOMAIN",
]

ERROR_DOMAIN = "strongroom.io"


class StrongroomError(Exception):
    """Base of every domain error. `reason` is the ErrorInfo reason; `code` the gRPC status name."""

    reason: ClassVar[str] = "UNKNOWN"
    code: ClassVar[str] = "UNKNOWN"
    retriable: ClassVar[bool] = False
    # Retriable by the caller only, once it did what the error asks (ORIGIN_GAP: send the
    # messages the gap misses first): the client hands it back at once instead of retrying the
    # call by itself, which would get the same answer until the caller acts.
    caller_retries: ClassVar[bool] = False

    def __init__(self, message: str = "", metadata: dict[str, str] | None = None) -> None:
        super().__init__(message or self.reason)
        self.message = message or self.reason
        self.metadata: dict[str, str] = dict(metadata or {})

    @property
    def retried_by_client(self) -> bool:
        """Whether a client tries the call again by itself (retriable, and not left to its caller):
        what the Python client rides out, and what makes a member end a stream's later requests
        with the same error so that the client's re-sends keep their order."""
        return self.retriable and not self.caller_retries


class NotLeaderError(StrongroomError):
    """This member is not the leader; `leader_address` names the one that is, if known."""

    reason = "NOT_LEADER"
    code = "FAILED_PRECONDITION"
    retriable = True

    def __init__(self, message: str = "", leader: str = "", leader_address: str = "") -> None:
        meta = {"leader": leader, "leader_address": leader_address}
        super().__init__(message or f"not the leader; leader is {leader or 'unknown'}", meta)
        self.leader = leader
        self.leader_address = leader_address


class NoLeaderError(StrongroomError):
    """No member currently holds the leadership."""

    reason = "NO_LEADER"
    code = "UNAVAILABLE"
    retriable = True


class NoQuorumError(StrongroomError):
    """The leader cannot reach a majority; nothing can commit."""

    reason = "NO_QUORUM"
    code = "UNAVAILABLE"
    retriable = True


class NotVoterError(StrongroomError):
    """This member is not one of its cluster's voters (being added, or removed): it may not lead."""

    reason = "NOT_VOTER"
    code = "FAILED_PRECONDITION"
    retriable = True


class StaleEpochError(StrongroomError):
    """A replication call carried an epoch older than the one this member promised."""

    reason = "STALE_EPOCH"
    code = "FAILED_PRECONDITION"


class PersistenceUnavailable(StrongroomError):
    """The store cannot take the operation now: the leader is stepping down or recovering, its
    storage failed, or an operator disconnected the cluster's persistent store
    (docs/store-operations.md; metadata `state`, `since` and `cause` then). Retriable; a
    disconnected store is retried by the caller once an operator connects it (the client hands
    that one back at once: a disconnect lasts as long as the operator wants)."""

    reason = "PSTORE_UNAVAILABLE"
    code = "UNAVAILABLE"
    retriable = True

    @property
    def retried_by_client(self) -> bool:
        return not self.metadata.get("state")


class NotOperational(StrongroomError):
    """The instance answering is the standby of a shared store (docs/store-operations.md,
    "Standby on a shared store") and does not serve: its standard stopped answering and it is
    taking the store over (waiting for the store's lock, restoring every persistent record), or
    it is still checking its standard. Retriable: once the takeover is done the same address
    serves. Metadata `partner` names the other instance's address, `state` (from a standby) what
    it does."""

    reason = "NOT_OPERATIONAL"
    code = "UNAVAILABLE"
    retriable = True


class NoNewUow(StrongroomError):
    """The cluster's persistent store takes no new units of work (docs/store-operations.md): an
    operator connected it again after a disconnect, or it exceeded its capacity. Commands that
    consume (receive, acknowledge, settle, subscribe to an existing durable) are served; ones that
    produce (publish to a replicated store, send or commit a new persistent unit of work or
    publication, create a durable, write a map) are refused until an operator lifts the state
    (`strongroom store allow-new`). Metadata `since` (unix seconds) and `cause` (operator or
    capacity)."""

    reason = "NO_NEW_UOW"
    code = "FAILED_PRECONDITION"


class StoreStateError(StrongroomError):
    """An operator's store operation that the persistent store's state does not allow: connecting
    a store that is not disconnected, disconnecting one that is, allowing new units of work while
    it is unavailable, already allows them, or is still over its capacity. Nothing changed;
    metadata `state` names the state it is in."""

    reason = "PSTORE_STATE"
    code = "FAILED_PRECONDITION"


class StoreLimitExceeded(StrongroomError):
    """The store is at its configured limit and rejects new messages."""

    reason = "STORE_LIMIT_EXCEEDED"
    code = "RESOURCE_EXHAUSTED"


class NoInterest(StrongroomError):
    """No durable wants the message and its destination's rule refuses such publishes
    (`require_interest`): nothing was stored."""

    reason = "NO_INTEREST"
    code = "FAILED_PRECONDITION"


class MessageTooLarge(StrongroomError):
    """The message is larger than the store's maximum message size."""

    reason = "MESSAGE_TOO_LARGE"
    code = "INVALID_ARGUMENT"


class UnknownDestination(StrongroomError):
    """No destination of the realm matches the name."""

    reason = "UNKNOWN_DESTINATION"
    code = "NOT_FOUND"


class UnknownDurableKind(StrongroomError):
    """The durable kind is not one of standard, shared, last-value."""

    reason = "UNKNOWN_DURABLE_KIND"
    code = "INVALID_ARGUMENT"


class UnknownMessage(StrongroomError):
    """An acknowledgment names a message the durable does not hold."""

    reason = "UNKNOWN_MESSAGE"
    code = "NOT_FOUND"


class ForeignMessage(StrongroomError):
    """An acknowledgment names a message delivered to another subscription."""

    reason = "FOREIGN_MESSAGE"
    code = "FAILED_PRECONDITION"


class SequenceOutsideWindow(StrongroomError):
    """A message id older than the producer's deduplication window: whether it was stored
    cannot be told any more, so it is neither stored nor confirmed."""

    reason = "SEQUENCE_OUTSIDE_DEDUP_WINDOW"
    code = "FAILED_PRECONDITION"


class InvalidOrigin(StrongroomError):
    """A published message carries an origin (Message.origin) that cannot be meant here: its
    destination is not a topic of a routed store that also exists at another cluster, the
    origin names this cluster, a cluster or store other than the store's, sequence 0, or a
    `previous` not below its sequence. Nothing was stored."""

    reason = "INVALID_ORIGIN"
    code = "INVALID_ARGUMENT"


class OriginGap(StrongroomError):
    """A forwarded message's origin sequence is above the mark of its origin cluster and
    destination, but its `previous` is not the mark: a message between them is not stored yet
    (a stale router replica, or messages lost on the way). Nothing was stored; once the
    missing messages are stored, the same message is accepted."""

    reason = "ORIGIN_GAP"
    code = "FAILED_PRECONDITION"
    retriable = True
    caller_retries = True


class InvalidArgument(StrongroomError):
    """A request field is missing or malformed."""

    reason = "INVALID_ARGUMENT"
    code = "INVALID_ARGUMENT"


class RealmInvalid(StrongroomError):
    """The realm document has problems; `problems` lists them as file:line: message."""

    reason = "REALM_INVALID"
    code = "INVALID_ARGUMENT"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid realm:\n  " + "\n  ".join(problems))
        self.problems = problems


class RealmVersionConflict(StrongroomError):
    """`expected_version` was given but another version is now current; re-read and retry."""

    reason = "REALM_VERSION_CONFLICT"
    code = "ABORTED"  # a failed test-and-set: the client restarts its read-modify-write


class RealmVersionNotFound(StrongroomError):
    """No realm has been applied yet, or the requested version does not exist."""

    reason = "REALM_VERSION_NOT_FOUND"
    code = "NOT_FOUND"


class UnknownMember(StrongroomError):
    """A member started with a name its cluster in the realm does not list."""

    reason = "UNKNOWN_MEMBER"
    code = "INVALID_ARGUMENT"


class DataCorruption(StrongroomError):
    """Stored data failed a consistency check."""

    reason = "DATA_CORRUPTION"
    code = "DATA_LOSS"


class StoreDriverMismatch(StrongroomError):
    """A member's data directory holds a store another storage driver wrote than the one its
    cluster's realm selects: the member refuses to start (migration by unload and load changes
    a driver)."""

    reason = "STORE_DRIVER_MISMATCH"
    code = "FAILED_PRECONDITION"

    def __init__(self, message: str, found: str = "", wanted: str = "") -> None:
        super().__init__(message, {"found": found, "wanted": wanted})


class MigrationRefused(StrongroomError):
    """A store migration's load instance refused a call of its unload partner: a transfer
    without a handshake that held, a record of a family its database was not opened with, a
    database sent twice (docs/store-operations.md, "Migration: unload and load"). The load
    instance stops; nothing it wrote is a store to serve from."""

    reason = "MIGRATION_REFUSED"
    code = "FAILED_PRECONDITION"


class UnknownOperation(DataCorruption):
    """A committed log entry holds an operation this version does not know (written by a
    newer version): applying past it would leave this member's state different from the
    others'."""

    reason = "UNKNOWN_OPERATION"


class SubscriptionClosed(StrongroomError):
    """The subscription is closed: by the application (`close()`), or by the server for a
    reason that ends it for good (a subclass says which). Client side: `Subscription.next()`
    raises it."""

    reason = "SUBSCRIPTION_CLOSED"
    code = "CANCELLED"


class SubscriptionReplaced(SubscriptionClosed):
    """A standard durable got a second subscriber; the first is closed."""

    reason = "REPLACED"
    code = "ABORTED"


class DurableUnreachable(SubscriptionClosed):
    """A subscription's end: a realm version made its durable unreachable (its destination's
    rule changed kind or went away); the durable keeps its backlog. Reopening would reach
    another durable, so the client does not."""

    reason = "DURABLE_UNREACHABLE"
    code = "FAILED_PRECONDITION"


class DurableDeleted(SubscriptionClosed):
    """A subscription's end: an operator deleted its durable, or it expired unused."""

    reason = "DURABLE_DELETED"
    code = "NOT_FOUND"


class DurableMismatch(StrongroomError):
    """A subscriber asked for an existing durable with another kind, matcher or template than
    the durable was created with."""

    reason = "DURABLE_MISMATCH"
    code = "FAILED_PRECONDITION"


class UnknownDurable(StrongroomError):
    """A durable an operator named does not exist (delete)."""

    reason = "UNKNOWN_DURABLE"
    code = "NOT_FOUND"


class LogFormatPending(StrongroomError):
    """The operation needs a log format some member of the cluster does not read yet (an older
    version is still running): retry once every member runs this version."""

    reason = "LOG_FORMAT_PENDING"
    code = "FAILED_PRECONDITION"


class UnknownUow(StrongroomError):
    """No unit of work with this id: never sent, its status lifetime ended, or (not
    persistent) it went with the leader that held it."""

    reason = "UNKNOWN_UOW"
    code = "NOT_FOUND"


class UowStateError(StrongroomError):
    """The unit of work's status does not allow the action (adding to a committed UOW,
    committing twice, receiving a UOW not ACCEPTED ...)."""

    reason = "UOW_STATE"
    code = "FAILED_PRECONDITION"


class UowNotHeld(StrongroomError):
    """A receiver settles a unit of work it does not hold."""

    reason = "UOW_NOT_HELD"
    code = "FAILED_PRECONDITION"


class UowExists(StrongroomError):
    """Opening a unit of work under an id that is open (or complete and still known)."""

    reason = "UOW_EXISTS"
    code = "ALREADY_EXISTS"


class NotSubscribed(StrongroomError):
    """Receiving publications of a durable topic (or ending a subscription) under a name that
    has no durable subscription to it: subscribe first."""

    reason = "NOT_SUBSCRIBED"
    code = "FAILED_PRECONDITION"


class UowAborted(StrongroomError):
    """The open unit of work was backed out because the leader changed before its sender
    committed it (what was added lived on the old leader only): nothing of it is visible. The
    call is not retried as it is (the UOW is gone); gRPC's ABORTED says what to do: send the
    whole UOW again, as a new one."""

    reason = "UOW_ABORTED"
    code = "ABORTED"


class InvalidMatcher(StrongroomError):
    """A content matcher is malformed (empty field name, no condition, a last-value subscriber
    without its key field)."""

    reason = "INVALID_MATCHER"
    code = "INVALID_ARGUMENT"


class MapsNotAllowed(StrongroomError):
    """The store does not allow maps (routed, or the realm sets maps: false)."""

    reason = "MAPS_NOT_ALLOWED"
    code = "FAILED_PRECONDITION"


class UnknownStore(StrongroomError):
    """No store of the realm has the name, or it belongs to another cluster."""

    reason = "UNKNOWN_STORE"
    code = "NOT_FOUND"


class KeyNotFound(StrongroomError):
    """A map read names a key the map does not hold. Client side: the server answers
    `found: false`, the client raises this."""

    reason = "KEY_NOT_FOUND"
    code = "NOT_FOUND"


class VersionMismatch(StrongroomError):
    """A map update expected another version of the key than the one it has. Client side:
    the server answers `swapped: false`; metadata `current_version` holds the key's version
    (0: the key does not exist)."""

    reason = "VERSION_MISMATCH"
    code = "FAILED_PRECONDITION"


class KeyExists(VersionMismatch):
    """A map create names a key that exists already (an update expecting version 0)."""

    reason = "KEY_EXISTS"


class ConnectionFailed(StrongroomError):
    """A call got no answer from Strongroom: the member is down or unreachable, the
    connection broke, or the call's deadline passed. Client side, from a gRPC status that
    carries no Strongroom reason (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, UNKNOWN,
    INTERNAL); metadata `grpc_code` names the status."""

    reason = "CONNECTION_FAILED"
    code = "UNAVAILABLE"
    retriable = True


class RpcFailed(StrongroomError):
    """A call failed with a gRPC status that carries no Strongroom reason and that a retry
    would not change (e.g. UNIMPLEMENTED: the address is not a Strongroom member). Client
    side; metadata `grpc_code` names the status."""

    reason = "RPC_FAILED"
    code = "UNKNOWN"


class NotActiveRouter(StrongroomError):
    """A RouterService call reached a router replica that is not its cluster's active router
    (a standby, or one that lost its election key); metadata `active_replica` names the active
    one when known."""

    reason = "NOT_ACTIVE_ROUTER"
    code = "FAILED_PRECONDITION"
    retriable = True


class StandbyRefusal(StrongroomError):
    """A client call reached a member of a cluster's disaster-recovery standby set, which serves
    no clients while the primary site does (docs/dr.md); metadata `primary` names the primary's
    addresses."""

    reason = "STANDBY"
    code = "FAILED_PRECONDITION"


class NotStandby(StrongroomError):
    """Entries were shipped (`ShipEntries`) to a member that is not in a standby set: a primary
    takes entries only from its own leader."""

    reason = "NOT_STANDBY"
    code = "FAILED_PRECONDITION"


class LogDiverged(StrongroomError):
    """Shipped entries (or a snapshot) do not continue the standby's log: the entry before them,
    or at the snapshot's index, has another epoch at the standby than at the primary. The two
    sites hold different histories (a primary rebuilt or restarted empty, a standby pointed at
    another cluster); nothing is stored, and shipping stops until an operator decides."""

    reason = "DIVERGED"
    code = "FAILED_PRECONDITION"


class UnknownCluster(StrongroomError):
    """A call names a cluster the service does not serve (a DR service serves one)."""

    reason = "UNKNOWN_CLUSTER"
    code = "NOT_FOUND"


class Fenced(StrongroomError):
    """The member's site was the cluster's primary and learnt that the other site was activated
    as the primary of a newer DR generation: it accepts no write (nor ships anything) until an
    operator demotes it (`strongroom dr demote`). Metadata `primary` names the newer primary's
    addresses, `generation` its generation."""

    reason = "FENCED"
    code = "FAILED_PRECONDITION"


class PrimaryHealthy(StrongroomError):
    """Activation of a standby whose primary still answers and has a serving leader: refused
    unless forced (`strongroom dr activate --force`); nothing changed."""

    reason = "PRIMARY_HEALTHY"
    code = "FAILED_PRECONDITION"


class WrongDrRole(StrongroomError):
    """A DR action that needs a site other than this one's role: activating a site that is not a
    standby, demoting a site that no newer primary superseded (the only primary); nothing
    changed."""

    reason = "DR_ROLE"
    code = "FAILED_PRECONDITION"


class PermissionDenied(StrongroomError):
    """The caller may not make this call: metadata `permission` names what it lacks and
    `refusal` why (`no_identity`, `wrong_identity`, `impersonation`: docs/security.md)."""

    reason = "PERMISSION_DENIED"
    code = "PERMISSION_DENIED"

    def __init__(self, message: str = "", permission: str = "", refusal: str = "") -> None:
        super().__init__(message or f"permission {permission!r} denied",
                         {"permission": permission, "refusal": refusal})


class Unauthenticated(StrongroomError):
    """The call's credentials prove no user: metadata `refusal` says why (`certificate_revoked`:
    the caller's certificate is on the authority's revocation list; `no_identity`: neither a
    user's certificate nor a token; `token_malformed`, `token_unknown`, `token_forged`,
    `token_revoked`, `token_expired`: the bearer token's fault)."""

    reason = "UNAUTHENTICATED"
    code = "UNAUTHENTICATED"

    def __init__(self, message: str = "", refusal: str = "") -> None:
        super().__init__(message or "not authenticated", {"refusal": refusal})


class UnknownToken(StrongroomError):
    """A revocation names a token that was never issued at this site."""

    reason = "UNKNOWN_TOKEN"
    code = "NOT_FOUND"


_REGISTRY: dict[str, type[StrongroomError]] = {}
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, StrongroomError):
        _REGISTRY[_cls.reason] = _cls


def error_for_reason(reason: str, message: str, metadata: dict[str, str] | None = None) -> StrongroomError:
    """The domain error of an ErrorInfo reason: rebuilt on the client side from a server's
    answer, and made on the leader from a refusal the state machine decided at apply."""
    meta = dict(metadata or {})
    cls = _REGISTRY.get(reason, StrongroomError)
    if cls is NotLeaderError:
        return NotLeaderError(message, meta.get("leader", ""), meta.get("leader_address", ""))
    if cls is RealmInvalid:
        return RealmInvalid([line.strip() for line in message.splitlines()[1:]] or [message])
    err = cls.__new__(cls)
    StrongroomError.__init__(err, message, meta)
    return err
