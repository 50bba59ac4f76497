"""The command line: cyclopts commands, registered lazily so --help stays fast."""
