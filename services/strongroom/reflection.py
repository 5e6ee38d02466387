"""gRPC server reflection, served as `grpc.reflection.v1` and `grpc.reflection.v1alpha`.

grpcurl, Postman and other newer tools ask for v1 first (older ones for v1alpha only), and
grpcio-reflection serves v1alpha alone. The two versions are the same protocol: identical
messages under another package name, so one servicer answers both, its messages read and
written in v1alpha's classes, which encode exactly as v1's. So that reflection can describe the
v1 service too (`grpcurl describe grpc.reflection.v1.ServerReflection`), its file is added to
the default descriptor pool, made from v1alpha's with the package renamed.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

__all__ = ["V1ALPHA_SERVICE_NAME", "V1_SERVICE_NAME", "enable_reflection"]

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
"""grpc.reflection.v1alpha.ServerReflection"""
V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
_ALPHA_PACKAGE = ".grpc.reflection.v1alpha."
_V1_PACKAGE = ".grpc.reflection.v1."


def _add_v1_file() -> None:
    """Put grpc/reflection/v1/reflection.proto into the default pool (once): v1alpha's file with
    the package renamed."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = "grpc.reflection.v1"
    proto.ClearField("options")
    for message in proto.message_type:
        for fld in message.field:
            if fld.HasField("type_name"):  # proto2: assigning even "" would set it
                fld.type_name = fld.type_name.replace(_ALPHA_PACKAGE, _V1_PACKAGE)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(_ALPHA_PACKAGE, _V1_PACKAGE)
            method.output_type = method.output_type.replace(_ALPHA_PACKAGE, _V1_PACKAGE)
    pool.AddSerializedFile(proto.SerializeToString())


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection of `service_names` (and of reflection itself, both versions) on `server`."""
    _add_v1_file()
    names = [*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME]
    servicer = reflection.aio.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    v1 = grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString),
    })
    server.add_generic_rpc_handlers((v1,))
