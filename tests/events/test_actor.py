"""The actor's host is this machine's name as the socket module gives it."""

import socket

from overbrainer.events.actor import Actor, this_host


def test_this_host_is_the_machines_name() -> None:
    assert this_host() == socket.gethostname()
    assert Actor.here("runs ls").host == socket.gethostname()
