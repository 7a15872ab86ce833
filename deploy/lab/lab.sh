#!/bin/bash
#
# The Soft-RoCE lab's command (see README.md beside this script): lab.py, run by the system's
# python3. A python3 found first on PATH may be a version manager's shim, which costs 0.3 s a
# call where Debian's python3 starts in 0.02 s, and a lab test runs lab.sh hundreds of times;
# for the same reason lab.py runs as a module (-m), whose compiled form Python keeps in
# __pycache__ beside it, and with -S: it needs the standard library only.
python=/usr/bin/python3
[[ -x $python ]] || python=python3
PYTHONPATH=$(dirname -- "${BASH_SOURCE[0]}") exec "$python" -S -m lab "$@"
