"""`strongroom publish DEST`: publish messages (one, or many pipelined), with confirmation
unless `--no-confirm`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from strongroom.cli.common import (
    CLIENT_NAME,
    CliError,
    ExitCode,
    non_negative,
    parse_match,
    positive,
    resolve_endpoints,
    where_options,
)

__all__ = ["FIELD_HELP", "PUBLISH_WINDOW", "add_parsers", "cmd_publish", "make_body", "message_fields"]

PUBLISH_WINDOW = 256
PROGRESS_INTERVAL = 1.0


FIELD_HELP = ("a typed message field (repeatable; a JSON value types it: sym=A is a string, "
              "qty=5 an integer, px=1.5 a float, ok=true a boolean)")


def message_fields(given: list[str]) -> dict[str, object] | None:
    """`--field NAME=VALUE` options as a message's typed fields (None: none); one without `=` is
    a usage error."""
    for f in given:
        if "=" not in f:
            raise CliError.usage(f"--field {f!r}: use NAME=VALUE")
    return parse_match(given, "--field") or None


def make_body(template: str | None, size: int | None, index: int) -> bytes:
    """The body of message `index`: the template with '{i}' replaced, padded or cut to `size`."""
    text = (template if template is not None else "message {i}").replace("{i}", str(index))
    body = text.encode()
    if size is not None:
        body = body[:size] if len(body) >= size else body + b"." * (size - len(body))
    return body


class _Progress:
    """A progress line on stderr, at most once a second (overwritten in place on a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.printed = False

    def show(self, text: str) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
        self.printed = True

    def done(self) -> None:
        if self.printed and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def cmd_publish(args: argparse.Namespace) -> int:
    """Publish `--count` messages to DEST and print what the leader said."""
    return asyncio.run(_publish(args, message_fields(args.field)))


async def _publish(args: argparse.Namespace, fields: dict[str, object] | None) -> int:
    from strongroom.client import Client, PublishResult

    client = Client(resolve_endpoints(args), client_name=CLIENT_NAME)
    progress = _Progress()
    sent = confirmed = duplicates = unwanted = 0
    errors: list[BaseException] = []
    last: PublishResult | None = None
    start = time.monotonic()
    reporter: asyncio.Task[None] | None = None

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            elapsed = time.monotonic() - start
            progress.show(f"{sent}/{args.count} sent, {confirmed} confirmed, {confirmed / elapsed:,.0f} msgs/s")

    def record(result: PublishResult) -> None:
        nonlocal confirmed, duplicates, unwanted, last
        last = result
        confirmed += int(result.confirmed)
        duplicates += int(result.duplicate)
        unwanted += int(result.no_interest)

    pending: set[asyncio.Future[PublishResult]] = set()

    def on_done(fut: asyncio.Future[PublishResult]) -> None:
        pending.discard(fut)
        if fut.cancelled():
            errors.append(asyncio.CancelledError())
        elif (exc := fut.exception()) is not None:
            errors.append(exc)
        else:
            record(fut.result())

    try:
        if args.count > 1:
            reporter = asyncio.create_task(report())
        confirm = False if args.no_confirm else None  # None: the store's publisher mode
        if args.count == 1:
            record(await client.publish(args.destination, make_body(args.body, args.size, 0), fields=fields,
                                        confirm=confirm, traceparent=args.traceparent))
            sent = 1
        else:
            pub = client.publisher(args.destination, window=PUBLISH_WINDOW, confirm=confirm)
            try:
                for i in range(args.count):
                    if errors:  # a refused message (unknown destination, too large): stop at once
                        break
                    f = await pub.send(make_body(args.body, args.size, i), fields, traceparent=args.traceparent)
                    sent += 1
                    pending.add(f)
                    f.add_done_callback(on_done)
                while pending and not errors:
                    await asyncio.wait(set(pending), return_when=asyncio.FIRST_EXCEPTION)
            finally:
                # After a failure nothing more will be confirmed; do not let close() wait for it.
                for f in list(pending):
                    f.cancel()
                await pub.close()
            await asyncio.sleep(0)  # let the last done-callbacks run
    finally:
        if reporter is not None:
            reporter.cancel()
        progress.done()
        await client.close()
    if errors:
        raise errors[0]
    _print_summary(args, sent, confirmed, duplicates, unwanted, last, time.monotonic() - start)
    return ExitCode.OK


def _print_summary(args: argparse.Namespace, sent: int, confirmed: int, duplicates: int, unwanted: int,
                   last: Any, seconds: float) -> None:
    rate = sent / seconds if seconds > 0 else 0.0
    if args.json:
        summary: dict[str, Any] = {"destination": args.destination, "count": sent, "confirmed": confirmed,
                                   "not_stored": unwanted, "duplicates": duplicates, "seconds": round(seconds, 3),
                                   "msgs_per_s": round(rate, 1)}
        if args.count == 1 and last is not None:
            summary["message_seq"] = int(last.message_seq)
        print(json.dumps(summary))
        return
    if args.count == 1 and last is not None:
        state = "confirmed" if last.confirmed else "not confirmed"
        dup = ", duplicate" if last.duplicate else ""
        if last.no_interest:
            print(f"published to {args.destination}: not stored: no durable wants {args.destination!r} "
                  f"(subscribe with a durable first, or publish to a queue)")
        else:
            print(f"published to {args.destination}: message seq {last.message_seq} ({state}{dup})")
    else:
        print(f"published {sent} messages to {args.destination} in {seconds:.2f} s ({rate:,.0f} msgs/s), "
              f"{confirmed} confirmed" + (f", {duplicates} duplicates" if duplicates else ""))
        if unwanted:
            print(f"not stored: {unwanted} of them: no durable wants {args.destination!r} "
                  f"(subscribe with a durable first, or publish to a queue)")


def add_parsers(sub: Any) -> None:
    """Add `publish`."""
    p = sub.add_parser("publish", parents=[where_options()], help="publish messages with confirmation")
    p.add_argument("destination", metavar="DEST")
    p.add_argument("--count", type=positive, default=1, metavar="N", help="messages to publish (default 1)")
    p.add_argument("--size", type=non_negative, default=None, metavar="B",
                   help="body size in bytes: the body is padded with '.' or cut to B bytes")
    p.add_argument("--body", default=None, metavar="TEXT",
                   help="body text; '{i}' is replaced by the message index (default 'message {i}')")
    p.add_argument("--no-confirm", action="store_true",
                   help="do not wait for commit (store_send_noconfirm)")
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE", help=FIELD_HELP)
    p.add_argument("--traceparent", default="", metavar="TRACEPARENT",
                   help="a W3C trace context every message carries to its subscribers (00-<32 hex>-<16 hex>-<2 hex>)")
    p.add_argument("--json", action="store_true", help="print one JSON summary")
    p.set_defaults(func=cmd_publish)
