"""``python -m agentsessions verify JOURNAL...`` (see :mod:`agentsessions.verify`)."""

import sys

from .verify import main


def _cli(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m agentsessions verify JOURNAL... [--session UID] [--json] [-q]")
        return 0 if argv else 2
    if argv[0] != "verify":
        print(f"agentsessions: unknown command {argv[0]!r} (try: verify)", file=sys.stderr)
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
