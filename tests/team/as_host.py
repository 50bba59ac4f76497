"""``python -m tests.team.as_host HOST ARGS…``: the real ``overbrainer`` command, on a machine
named HOST. Two checkouts of a team store on one test machine then act as two hosts would:
the actor of every event and ``this_host()`` both read ``socket.gethostname``."""

import socket
import sys

from overbrainer.cli.main import main

if __name__ == "__main__":
    name = sys.argv[1]
    socket.gethostname = lambda: name
    sys.exit(main(sys.argv[2:]))
