"""`strongroom uow send|receive|status|subscribe|unsubscribe|subscriptions` and the units-of-work lines of `strongroom status`, run
as a user runs them (the `strongroom` command in a subprocess, `-s` naming the members) against
a real 3-member cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from harness import Cluster, realm_yaml, running_cluster, strongroom


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    durable_topic = "  - name: cli.news\n    kind: topic\n    store: default\n    units_of_work:\n      durable: true\n"
    with running_cluster(tmp_path_factory.mktemp("uow-cli"), realm_yaml(extra_destinations=durable_topic)) as c:
        yield c


@pytest.fixture
async def servers(cluster: Cluster) -> str:
    """The -s value, once the cluster has a leader."""
    await cluster.leader()
    return ",".join(cluster.addresses())



def ok_json(servers: str, *argv: str) -> Any:
    done = strongroom(servers, *argv, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_send_status_receive_commit_status(servers: str) -> None:
    sent = ok_json(servers, "uow", "send", "cli.queue", "--count", "3", "--field", "qty=5", "--user-status", "new")
    uow_id = sent["uow_id"]
    assert (sent["destination"], sent["status"], sent["messages"], sent["duplicate"]) == ("cli.queue", "ACCEPTED",
                                                                                         3, False)
    status = ok_json(servers, "uow", "status", uow_id)
    assert (status["status"], status["messages"], status["destination"], status["user_status"]) == (
        "ACCEPTED", 3, "cli.queue", "new")

    got = ok_json(servers, "uow", "receive", "cli.queue", "--receiver", "worker-1", "--wait", "5",
                  "--user-status", "done")
    assert (got["uow_id"], got["receiver"], got["backout_count"], got["settlement"], got["status"]) == (
        uow_id, "worker-1", 0, "commit", "PROCESSED")
    assert [(m["index"], m["count"], m["body"], m["fields"]) for m in got["messages"]] == [
        (1, 3, "message 0", {"qty": 5}), (2, 3, "message 1", {"qty": 5}), (3, 3, "message 2", {"qty": 5})]

    status = ok_json(servers, "uow", "status", uow_id)
    assert (status["status"], status["receiver"], status["user_status"]) == ("PROCESSED", "worker-1", "done")
    assert status["completed_at"] >= status["created_at"] > 0
    # Processed: nothing is left to receive.
    empty = strongroom(servers, "uow", "receive", "cli.queue")
    assert empty.returncode == 1 and empty.stdout == ""
    assert "no unit of work on 'cli.queue' within 0 s" in empty.stderr


async def test_the_text_output_shows_the_id_then_each_message_i_of_n_and_the_settlement(servers: str) -> None:
    sent = strongroom(servers, "uow", "send", "text.queue", "--body", "alpha", "--body", "beta", "--id", "text-1")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.splitlines() == ["text-1", "ACCEPTED on text.queue: 2 messages"]
    got = strongroom(servers, "uow", "receive", "text.queue", "--backout")
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["text-1 from text.queue: 2 messages, backout count 0",
                                       "1/2 alpha", "2/2 beta", "backout: ACCEPTED, backout count 1"]
    # Backed out: offered again, with its count; this time cancelled.
    again = strongroom(servers, "uow", "receive", "text.queue", "--cancel")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == "text-1 from text.queue: 2 messages, backout count 1"
    assert again.stdout.splitlines()[-1] == "cancel: CANCELLED"
    status = strongroom(servers, "uow", "status", "text-1")
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == "uow text-1: CANCELLED"
    assert "  backout count:      1" in status.stdout.splitlines()
    # The same id again is the same UOW: nothing more is stored.
    dup = ok_json(servers, "uow", "send", "text.queue", "--body", "alpha", "--id", "text-1")
    assert dup["duplicate"] is True


async def test_no_commit_leaves_it_open_and_invisible(servers: str) -> None:
    sent = ok_json(servers, "uow", "send", "open.queue", "--count", "2", "--no-commit", "--lifetime", "600",
                   "--status-multiple", "3", "--no-persistent-status")
    assert (sent["status"], sent["messages"]) == ("RECEIVED", 2)
    status = ok_json(servers, "uow", "status", sent["uow_id"])
    assert (status["status"], status["lifetime_seconds"], status["status_lifetime_multiple"],
            status["persistent_status"]) == ("RECEIVED", 600.0, 3, False)
    nothing = strongroom(servers, "uow", "receive", "open.queue", "--wait", "0.5")
    assert nothing.returncode == 1 and "no unit of work on 'open.queue' within 0.5 s" in nothing.stderr


async def test_status_shows_the_pseudo_clock_and_the_stores_units_of_work(servers: str) -> None:
    ok_json(servers, "uow", "send", "count.queue", "--count", "4")
    text = strongroom(servers, "status")
    assert text.returncode == 0, text.stderr
    assert " uow clock " in text.stdout
    assert "    units of work: " in text.stdout and "committed, not settled" in text.stdout
    members = ok_json(servers, "status")
    leader = next(m for m in members if m.get("role") == "leader")
    assert leader["uow_clock"] > 0
    default = next(s for s in leader["stores"] if s["name"] == "default")
    assert default["uows"] >= 1 and default["uows_pending"] >= 1 and default["uow_messages"] >= 4


async def test_refusals_exit_1_with_the_reason_and_bad_usage_exits_2(servers: str) -> None:
    unknown = strongroom(servers, "uow", "status", "no-such-uow")
    assert unknown.returncode == 1 and "error: UNKNOWN_UOW: " in unknown.stderr
    bad_id = strongroom(servers, "uow", "send", "bad.queue", "--id", "not a valid id!")
    assert bad_id.returncode == 1 and "error: INVALID_ARGUMENT: " in bad_id.stderr
    zero = strongroom(servers, "uow", "send", "bad.queue", "--lifetime", "0")
    assert zero.returncode == 2
    assert "argument --lifetime: '0' is not a number of seconds above 0" in zero.stderr
    # Nothing of the refused sends was stored.
    assert strongroom(servers, "uow", "receive", "bad.queue").returncode == 1


async def test_durable_subscriptions_and_publications_from_the_command_line(servers: str) -> None:
    assert ok_json(servers, "uow", "subscribe", "cli.news", "reader-1")["created"] is True
    assert ok_json(servers, "uow", "subscribe", "cli.news", "reader-1")["created"] is False
    sent = ok_json(servers, "uow", "send", "cli.news", "--body", "headline", "--body", "story")
    listed = ok_json(servers, "uow", "subscriptions", "cli.news")
    assert [(s["subscriber"], s["pending"]) for s in listed["subscriptions"]] == [("reader-1", 1)]
    got = ok_json(servers, "uow", "receive", "cli.news", "--receiver", "reader-1")
    assert got["uow_id"] == sent["uow_id"]
    assert [m["body"] for m in got["messages"]] == ["headline", "story"]
    status = ok_json(servers, "uow", "status", sent["uow_id"])
    assert status["publication"] is True and status["status"] == "PROCESSED"
    assert status["subscribers"] == [{"subscriber": "reader-1", "status": "PROCESSED", "backout_count": 0}]
    text = strongroom(servers, "uow", "status", sent["uow_id"])
    assert "reader-1 PROCESSED" in text.stdout
    assert ok_json(servers, "uow", "unsubscribe", "cli.news", "reader-1")["released"] == 0
    refused = strongroom(servers, "uow", "receive", "cli.news", "--receiver", "reader-1")
    assert refused.returncode == 1 and "NOT_SUBSCRIBED" in refused.stderr


async def test_durable_list_and_delete_take_in_the_durable_subscriptions_of_publications(servers: str) -> None:
    ok_json(servers, "uow", "subscribe", "cli.news", "lister")
    ok_json(servers, "uow", "send", "cli.news", "--body", "waiting for lister")
    listed = ok_json(servers, "durable", "list", "--destination", "cli.news")
    rows = [r for r in listed["durables"] if r["kind"] == "publication"]
    assert [(r["name"], r["pending_messages"], r["store"]) for r in rows] == [("lister", 1, "default")]
    assert 0 < rows[0]["expires_in_seconds"] <= rows[0]["expiry_seconds"]
    other = ok_json(servers, "durable", "list", "--destination", "elsewhere.topic")
    assert [r for r in other["durables"] if r["kind"] == "publication"] == []
    text = strongroom(servers, "durable", "list")
    assert text.returncode == 0 and "publication" in text.stdout and "lister" in text.stdout
    usage = strongroom(servers, "durable", "delete", "cli.news", "--publication")
    assert usage.returncode == 2 and "TOPIC NAME" in usage.stderr
    deleted = ok_json(servers, "durable", "delete", "cli.news", "lister", "--publication")
    assert deleted["released_publications"] == 1
    after = ok_json(servers, "durable", "list", "--destination", "cli.news")
    assert [r for r in after["durables"] if r["kind"] == "publication"] == []
    again = strongroom(servers, "durable", "delete", "cli.news", "lister", "--publication")
    assert again.returncode == 1 and "NOT_SUBSCRIBED" in again.stderr
