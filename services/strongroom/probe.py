"""`python -m strongroom.probe PORT [--service NAME]`: the exec probe of a Strongroom process
whose gRPC port speaks mutual TLS (the Helm chart's startup, readiness and liveness probes).

The kubelet's own gRPC probe cannot present a client certificate, and every Strongroom port
refuses a caller without one. So with TLS on, the chart runs this in the process's container
instead: it dials the process on 127.0.0.1 with the container's TLS settings (the same
`STRONGROOM_TLS_*` files the process serves with, so it calls as the process's own identity),
expects the process to present that same certificate (it checks the first DNS name the
certificate names, whatever address it dialled), and asks the standard gRPC health service
(grpc.health.v1) about `--service` ("" by default: the process as a whole).

Exit status 0 when the service is SERVING, 1 when it is not or the call failed (one line on
stdout saying why, which the kubelet keeps in the pod's events), 2 for a usage error or TLS
files that cannot be read. Without TLS settings it asks in plaintext.

It imports gRPC, the health stubs and Strongroom's channel and TLS modules and nothing else
(not the CLI), so one probe costs about 0.15 s of CPU, most of it the interpreter's start and
gRPC's import.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped, unused-ignore]

from strongroom.channels import open_sync_channel
from strongroom.security.tls import Tls, current

__all__ = ["check", "main", "server_name"]


def server_name(tls: Tls) -> str | None:
    """The name the probe expects the process's certificate to carry: the first DNS name (not a
    wildcard) of the container's own certificate; None when it names none (an IP address only:
    127.0.0.1 is then checked)."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(tls.cert)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return next((n for n in names.get_values_for_type(x509.DNSName) if not n.startswith("*.")), None)


def check(port: int, service: str = "", timeout: float = 2.0, tls: Tls | None = None) -> str | None:
    """None when the process on 127.0.0.1:`port` reports `service` SERVING, else why not."""
    name = server_name(tls) if tls is not None else None
    # No CHANNEL_OPTIONS: their 100 ms reconnect backoff is also gRPC's connect timeout.
    options = [("grpc.ssl_target_name_override", name)] if name else []
    channel = open_sync_channel(f"127.0.0.1:{port}", options, tls)  # type: ignore[arg-type]
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    except grpc.RpcError as err:
        return f"health check of {service or 'the process'} on port {port} failed: {err.code().name}: {err.details()}"
    finally:
        channel.close()
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"{service or 'the process'} on port {port} is {status}"
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Run one probe; exit 0 SERVING, 1 not, 2 usage or TLS files."""
    parser = argparse.ArgumentParser(prog="python -m strongroom.probe",
                                     description="Ask a Strongroom process in this container for its gRPC health.")
    parser.add_argument("port", type=int, help="the process's gRPC port (it is dialled on 127.0.0.1)")
    parser.add_argument("--service", default="", help='the health service to ask about ("": the whole process)')
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds the call may take (default 2)")
    args = parser.parse_args(argv)
    try:
        tls = current()
    except (OSError, ValueError) as exc:
        print(f"cannot use the TLS settings of the environment: {exc}", flush=True)
        sys.exit(2)
    problem = check(args.port, args.service, args.timeout, tls)
    if problem is not None:
        print(problem, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
