"""Content matching: which messages a durable (or a subscriber) is interested in.

A matcher is a set of field conditions that must all hold: the field equals a typed value, is
present, or is absent. Equality is typed: an integer field never equals a float or a string
with the same digits, and a float NaN equals nothing. The state machine evaluates matchers on
every member when it applies a publish, so the functions here are pure and deterministic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from strongroom.api.v1 import common_pb2 as cpb
from strongroom.errors import InvalidMatcher

__all__ = ["Match", "compile_matcher", "validate_matcher", "matcher_text", "same_matcher", "key_of"]

Match = Callable[[cpb.Message], bool]
"""A compiled matcher: True when the message satisfies every condition."""

_PRESENT = cpb.FIELD_TEST_PRESENT
_ABSENT = cpb.FIELD_TEST_ABSENT


def validate_matcher(matcher: cpb.ContentMatcher) -> None:
    """Raise InvalidMatcher for a condition that cannot be evaluated."""
    for name, cond in matcher.fields.items():
        if not name:
            raise InvalidMatcher("a matcher field has an empty name")
        which = cond.WhichOneof("condition")
        if which is None:
            raise InvalidMatcher(f"matcher field {name!r} has no condition (equals, present or absent)")
        if which == "equals" and cond.equals.WhichOneof("value") is None:
            raise InvalidMatcher(f"matcher field {name!r}: equals carries no value")
        if which == "test" and cond.test not in (_PRESENT, _ABSENT):
            raise InvalidMatcher(f"matcher field {name!r}: test {cond.test} is neither present nor absent")


def _equal(a: cpb.FieldValue, b: cpb.FieldValue) -> bool:
    which = a.WhichOneof("value")
    if which is None or which != b.WhichOneof("value"):
        return False
    x, y = getattr(a, which), getattr(b, which)
    if which == "float_value" and (math.isnan(x) or math.isnan(y)):
        return False
    return bool(x == y)


def compile_matcher(matcher: cpb.ContentMatcher | None) -> Match | None:
    """A predicate for the matcher; None for an empty matcher (matches everything)."""
    if matcher is None or not matcher.fields:
        return None
    conditions: list[tuple[str, int, cpb.FieldValue | None]] = []
    for name in sorted(matcher.fields):
        cond = matcher.fields[name]
        if cond.WhichOneof("condition") == "equals":
            conditions.append((name, 0, cond.equals))
        else:
            conditions.append((name, cond.test, None))

    def match(message: cpb.Message) -> bool:
        fields = message.fields
        for name, test, value in conditions:
            if value is not None:
                if name not in fields or not _equal(fields[name], value):
                    return False
            elif test == _PRESENT:
                if name not in fields:
                    return False
            elif name in fields:
                return False
        return True

    return match


def same_matcher(a: cpb.ContentMatcher, b: cpb.ContentMatcher) -> bool:
    """Whether two matchers state the same conditions."""
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def _value_text(value: cpb.FieldValue) -> str:
    which = value.WhichOneof("value")
    x = getattr(value, which) if which else None
    if which == "string_value":
        return json.dumps(x, ensure_ascii=False)
    if which == "bytes_value":
        return f"b{x!r}"
    if which == "bool_value":
        return "true" if x else "false"
    return repr(x)


def matcher_text(matcher: cpb.ContentMatcher) -> str:
    """The matcher as text for status and errors, e.g. `price:present sym="A"`."""
    parts = []
    for name in sorted(matcher.fields):
        cond = matcher.fields[name]
        if cond.WhichOneof("condition") == "equals":
            parts.append(f"{name}={_value_text(cond.equals)}")
        else:
            parts.append(f"{name}:{'present' if cond.test == _PRESENT else 'absent'}")
    return " ".join(parts)


def key_of(value: cpb.FieldValue) -> str:
    """A last-value slot key for a field value: typed, so int 1 and string "1" are two keys."""
    return value.SerializeToString(deterministic=True).hex()
