"""`issue46.py --plain`: stands where `scaldiag` would in run.py's command line and runs the script
as `python SCRIPT ARGS` (the same working copy, environment and stdout capture, no scaldiag), so the
clocks a plain run prints are read the same way.

    plain_exec.py profile -q --out RUNS --json REPORT [flags] SCRIPT -- ARGS
"""

import os
import sys

if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--")
    script, args = argv[cut - 1], argv[cut + 1 :]
    os.execv(sys.executable, [sys.executable, script, *args])
