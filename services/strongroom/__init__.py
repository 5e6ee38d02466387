"""Strongroom: a replicated, persistent message store."""

import os as _os
import sys as _sys

# gRPC's I/O engine. grpcio's default (its "event engine" client and listener) cost a grpc.aio
# stream message about 0.05 ms more CPU per side than its classic pollers, and a publish waiting
# for its confirmation 0.1-0.2 ms more (p99 0.5 ms more) on these machines (README, Benchmarks).
# gRPC reads the setting once, when it is first imported; so it is set here, before any
# Strongroom module imports grpc, and only if nobody chose one: GRPC_EXPERIMENTS set in the
# environment (even empty) is left as it is, and a program that imported grpc before
# strongroom keeps gRPC's default.
GRPC_EXPERIMENTS = "-event_engine_client,-event_engine_listener"
#
# gRPC's fork handlers, off. No Strongroom process forks a child that goes on using gRPC: every
# child execs at once. With the handlers on, a fork through `preexec_fn` while calls are in
# flight (PySpark starts its JVM that way, so `strongroom metrics` and the Spark tests do) runs
# gRPC's child handler, which starts a poller in the child; `close_fds` then closes the poller's
# epoll descriptor and the child aborts before it execs ("epoll_wait error: Bad file
# descriptor"), which PySpark reports as JAVA_GATEWAY_EXITED. Same rule as above: set only when
# nobody chose, and only before grpc is imported.
GRPC_ENABLE_FORK_SUPPORT = "false"
if "grpc" not in _sys.modules:
    _os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
    _os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", GRPC_ENABLE_FORK_SUPPORT)
