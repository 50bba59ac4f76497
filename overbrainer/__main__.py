"""Entry point: ``overbrainer`` and ``python -m overbrainer``."""

import sys

from overbrainer.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
