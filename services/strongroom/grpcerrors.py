"""The gRPC boundary of the error table: domain error -> status + google.rpc.ErrorInfo."""

from __future__ import annotations

from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from strongroom.errors import ERROR_DOMAIN, NotLeaderError, StrongroomError, error_for_reason

__all__ = ["to_status", "abort_with", "from_rpc_error", "GENERATION_METADATA_KEY", "LEADER_METADATA_KEY",
           "PARTNER_METADATA_KEY"]

# Trailing metadata key naming the leader's address on NOT_LEADER, for plain stubs.
LEADER_METADATA_KEY = "strongroom-leader"
# Metadata key of the DR generation: the highest a client has seen, on its calls; the answering
# site's, on every answer of the client API (persistence/generations.py).
GENERATION_METADATA_KEY = "strongroom-generation"
# Metadata key of a shared store's partner instance: on every answer of the client API of its
# standard (docs/store-operations.md, "Standby on a shared store").
PARTNER_METADATA_KEY = "strongroom-partner"


def to_status(err: StrongroomError) -> grpc.Status:
    """Build the rich gRPC status for a domain error."""
    code = getattr(code_pb2, err.code)
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=ERROR_DOMAIN, metadata=err.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code, message=err.message, details=[detail])
    result = rpc_status.to_status(status)
    if isinstance(err, NotLeaderError) and err.leader_address:
        result = _with_leader(result, err.leader_address)
    return result


def _with_leader(status: grpc.Status, address: str) -> grpc.Status:
    class _Status(grpc.Status):  # type: ignore[misc]
        def __init__(self) -> None:
            self.code = status.code
            self.details = status.details
            self.trailing_metadata = tuple(status.trailing_metadata) + ((LEADER_METADATA_KEY, address),)

    return _Status()


async def abort_with(context: grpc.aio.ServicerContext, err: StrongroomError) -> NoReturn:  # type: ignore[type-arg]
    """Abort the current RPC with the error's status."""
    await context.abort_with_status(to_status(err))
    raise AssertionError("unreachable")


def from_rpc_error(exc: grpc.RpcError) -> StrongroomError | None:
    """Rebuild the domain error from a failed call, or None if it carries no ErrorInfo."""
    try:
        status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    except Exception:
        status = None
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            meta = dict(info.metadata)
            if not meta.get("leader_address"):
                for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
                    if key == LEADER_METADATA_KEY:
                        meta["leader_address"] = value
            return error_for_reason(info.reason, status.message, meta)
    return None
