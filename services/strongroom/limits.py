"""The largest message a Strongroom process sends or takes, and the batch bounds it implies.

Every gRPC channel and server of the project (`channels.py`) and the replication link's frames
take at most `MAX_MESSAGE_BYTES`; whatever gathers several records into one message stays well
inside it: an append to a follower behind (`APPEND_BATCH_BYTES`), a batch of deliveries to a
subscriber (`DELIVERY_BATCH_BYTES`), a snapshot's parts (`persistence/snapshots.py`). One
record larger than a batch's bound still goes, alone.
"""

from __future__ import annotations

import os

MAX_MESSAGE_BYTES = int(os.environ.get("STRONGROOM_MAX_MESSAGE_BYTES", str(512 * 1024 * 1024)))
"""`STRONGROOM_MAX_MESSAGE_BYTES` lowers it (a test shows no state needs a message of its size)."""

APPEND_BATCH_BYTES = min(32 * 1024 * 1024, MAX_MESSAGE_BYTES // 4)
"""Bytes of entries in one append to a follower behind."""

DELIVERY_BATCH_BYTES = min(8 * 1024 * 1024, MAX_MESSAGE_BYTES // 4)
"""Bytes of messages in one batch of deliveries to a subscriber."""
