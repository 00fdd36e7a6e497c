"""`specstate` (and `python -m specstate`): the library's command line, the same as the CMake
build's executable (check-golden, simulate, plan)."""
import sys

from . import _specstate


def main() -> int:
    if not getattr(_specstate, "HAS_CLI", False):
        sys.stderr.write("specstate: this build has no command line (CLI11 was not found)\n")
        return 2
    sys.stdout.flush()
    return _specstate._cli_main(["specstate", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
