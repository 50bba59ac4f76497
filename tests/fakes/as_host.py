"""``python -m tests.fakes.as_host HOST ARGS…``: the real ``overbrainer`` command, on a machine
named HOST. Two checkouts of a team store on one test machine then act as two hosts would:
the actor of every event and every comparison with this machine read
``overbrainer.events.actor.this_host``, replaced before any command module is loaded."""

import sys

from overbrainer.events import actor

if __name__ == "__main__":
    name = sys.argv[1]
    actor.this_host = lambda: name
    from overbrainer.cli.main import main

    sys.exit(main(sys.argv[2:]))
