"""``python -m benchmarks``: run the suite (see `benchmarks.main`)."""

from __future__ import annotations

import sys

from benchmarks import main

if __name__ == "__main__":
    sys.exit(main())
