"""A gRPC method handler with another behaviour in front of its own: what the server interceptors
(the DR generation's, `persistence/generations.py`; the revocation check's,
`security/calls.py`) wrap calls with. The handler's kind (unary or streaming, each way) and its
(de)serialisers are kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

__all__ = ["Handler", "behaviour", "replace_behaviour"]

Handler = grpc.RpcMethodHandler


def behaviour(handler: Handler) -> Callable[..., Any]:
    """The function the handler calls (whichever of its four kinds it is)."""
    return handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream


def replace_behaviour(handler: Handler, new: Callable[..., Any]) -> Handler:
    """The handler calling `new` instead, of the same kind and with the same serialisers."""
    make = {(False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler}[(handler.request_streaming,
                                                                  handler.response_streaming)]
    return make(new, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
