"""The durable at Rio of the `routing-pinned` configuration, in a process of its own (bench/routing.py):
Rio's application, so that it runs on Rio's core while the benchmark's own process (London's
publisher) runs on London's.

    python -m bench.routing_receiver --endpoints H:P,... --topic T --durable D --n N --credit C

Opens the standard durable (explicit acks), prints `READY`, receives and acknowledges the n
stamped messages (`Stamped`), prints one line of JSON with what it measured, and exits once its
standard input is closed (so the benchmark reads its CPU time before it goes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from bench.routing import RECEIVE_TIMEOUT, Stamped

__all__ = ["main"]


async def receive(endpoints: list[str], topic: str, durable: str, n: int, credit: int) -> dict[str, object]:
    """Receive and acknowledge n stamped messages on the durable; what `Stamped` recorded."""
    from strongroom.client import Client

    client = Client(endpoints, client_name="bench-rio-receiver", timeout=60.0)
    try:
        sub = await client.subscribe(topic, durable, kind="standard", ack="explicit", credit=credit)
        print("READY", flush=True)
        stamped = Stamped(n)
        try:
            while stamped.got < n:
                try:
                    m = await sub.next(timeout=RECEIVE_TIMEOUT)
                except TimeoutError:
                    return {"error": f"forwarded: {stamped.got} of {n} messages at Rio, then none for "
                                     f"{RECEIVE_TIMEOUT:.0f} s"}
                stamped.received(m.body, m.published_at)
                await sub.ack(m)
            await sub.acks_written()
        finally:
            await sub.close()
        return {"e2e": stamped.e2e, "store": stamped.store, "duplicates": stamped.duplicates,
                "last_stored": stamped.last_stored, "last_delivered": stamped.last_delivered}
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing_receiver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoints", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--durable", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--credit", type=int, required=True)
    a = p.parse_args(argv)
    result = asyncio.run(receive(a.endpoints.split(","), a.topic, a.durable, a.n, a.credit))
    print(json.dumps(result), flush=True)
    sys.stdin.read()  # until the benchmark closes it
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
