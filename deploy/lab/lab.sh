#!/bin/bash
#
# The Soft-RoCE lab's command (see README.md beside this script): lab.py, run by the system's
# python3. A python3 found first on PATH may be a version manager's shim, which costs 0.3 s a
# call where Debian's python3 starts in 0.02 s, and a lab test runs lab.sh hundreds of times;
# for the same reason lab.py is imported (Python keeps its compiled form in __pycache__ beside
# it) from this directory alone, never from the caller's, and with -S: it needs the standard
# library only.
python=/usr/bin/python3
[[ -x $python ]] || python=python3
exec "$python" -S -c 'import sys; sys.path[0] = sys.argv.pop(1); import lab; sys.exit(lab.main(sys.argv[1:]))' \
    "$(dirname -- "${BASH_SOURCE[0]}")" "$@"
