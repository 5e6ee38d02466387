"""What a publish must say before it reaches the log (publishing.check_publish), in-process."""

from __future__ import annotations

import pytest

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.api.v1 import messaging_pb2 as mpb
from strongroom.errors import InvalidArgument
from strongroom.persistence.publishing import Publish, check_publish


def _refused(item: object) -> str:
    with pytest.raises(InvalidArgument) as caught:
        check_publish(item)  # type: ignore[arg-type]
    return caught.value.message


def test_a_request_without_a_message_is_refused_and_an_empty_message_is_not() -> None:
    assert "message is required" in _refused(mpb.PublishRequest(destination="d.queue"))
    check_publish(mpb.PublishRequest(destination="d.queue", message=cpb.Message()))
    # Presence survives the wire: an empty message is sent as an empty field.
    wire = mpb.PublishRequest(destination="d.queue", message=cpb.Message()).SerializeToString()
    check_publish(mpb.PublishRequest.FromString(wire))


def test_half_a_message_id_is_refused() -> None:
    assert "needs a sequence of 1 or more" in _refused(
        Publish("d.queue", cpb.Message(body=b"x", producer_id="p")))
    assert "needs a producer_id" in _refused(Publish("d.queue", cpb.Message(body=b"x", sequence=4)))
    # A whole id, and no id at all (never deduplicated), are both fine.
    check_publish(Publish("d.queue", cpb.Message(body=b"x", producer_id="p", sequence=1)))
    check_publish(Publish("d.queue", cpb.Message(body=b"x")))


def test_a_field_needs_a_name_and_a_value() -> None:
    nameless = cpb.Message(body=b"x")
    nameless.fields[""].int_value = 1
    assert "needs a name" in _refused(Publish("d.queue", nameless))
    valueless = cpb.Message(body=b"x")
    valueless.fields["region"].SetInParent()
    assert "'region' has no value" in _refused(Publish("d.queue", valueless))
    typed = cpb.Message(body=b"x")
    typed.fields["region"].string_value = ""
    check_publish(Publish("d.queue", typed))  # an empty string is a value


def test_destination_and_mode_are_checked_as_before() -> None:
    assert "destination is required" in _refused(Publish("", cpb.Message()))
    assert "unknown publish mode 9" in _refused(Publish("d.queue", cpb.Message(), 9))
