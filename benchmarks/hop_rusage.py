#!/usr/bin/env python3
"""A hop of the loopback fan-out benchmark: run the hop's command, log its CPU.

    hop_rusage.py LOG NAME COMMAND

runs COMMAND with ``sh -c`` (as the lab's ``via`` does), waits for it with
``wait4`` and appends one JSON line to LOG: the CPU seconds of COMMAND and
everything it waited for (the hops after it), and this wrapper's own.
"""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

log, name, command = sys.argv[1], sys.argv[2], sys.argv[3]
proc = subprocess.Popen(["sh", "-c", command])
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
me = resource.getrusage(resource.RUSAGE_SELF)
with Path(log).open("a", encoding="utf-8") as out:
    out.write(
        json.dumps(
            {
                "hop": name,
                "child_cpu_s": usage.ru_utime + usage.ru_stime,
                "self_cpu_s": me.ru_utime + me.ru_stime,
            }
        )
        + "\n"
    )
sys.exit(proc.returncode)
