"""Run `git-mgit filter-process` and record its peak RSS (wait4: it and its children).

Configured as filter.mgit.process by the memory test; the peak in KiB is
appended to the file named by MGIT_TEST_RSS_LOG when the filter exits.
"""

import os
import subprocess
import sys

proc = subprocess.Popen(["git-mgit", "filter-process"])
_, status, usage = os.wait4(proc.pid, 0)
with open(os.environ["MGIT_TEST_RSS_LOG"], "a") as log:
    log.write(f"{usage.ru_maxrss}\n")
sys.exit(os.waitstatus_to_exitcode(status))
