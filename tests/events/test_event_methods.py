"""Every event type compares, hashes and shows itself exactly as the dataclass generated for
it would: the methods are the base class's, written once."""

import dataclasses
from typing import Any

import pytest

from overbrainer.events import types as ev
from tests.events.scripted import EVERY_TYPE

EVENTS = [event for _, event in EVERY_TYPE]


def _reference(cls: type[ev.Event]) -> Any:
    """The class ``@dataclass(frozen=True, kw_only=True)`` makes of ``cls``'s fields."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__qualname__, fields, frozen=True, kw_only=True)


def _changed(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "set"
    return [value]


def test_the_script_holds_every_event_type() -> None:
    assert {type(event) for event in EVENTS} == set(ev.CATALOGUE.values())


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.name)
def test_an_event_is_compared_hashed_and_shown_as_its_dataclass_would_be(event: ev.Event) -> None:
    values = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    reference = _reference(type(event))
    twin = reference(**values)
    assert repr(event) == repr(twin)
    same = type(event)(**values)
    assert event == same
    assert (event != same) is False
    assert (event == twin) is False  # another class: never equal, as a dataclass says
    assert event.__eq__(twin) is NotImplemented
    try:
        expected_hash: int | None = hash(twin)
    except TypeError:  # a field holds a list or a dict, as in the dataclass
        expected_hash = None
        with pytest.raises(TypeError):
            hash(event)
    if expected_hash is not None:
        assert hash(event) == hash(same) == expected_hash
    for name, value in values.items():
        other = type(event)(**{**values, name: _changed(value)})
        assert other != event
        assert (other == event) == (reference(**{**values, name: _changed(value)}) == twin)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.name_of_nothing = 1  # type: ignore[attr-defined]
