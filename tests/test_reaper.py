"""dara.reaper: a run's process adopts the orphans its descendants leave and ends what it started, sparing what
its process had started before the run (run in a child interpreter, so the test process stays as it is)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import dara

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc: Linux only")

SCRIPT = r'''
import json, subprocess, sys, time
from dara.reaper import adopt_orphans, descendants, end_descendants, now_ticks

quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
earlier = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], **quiet)  # not the run's
time.sleep(0.2)
started = now_ticks()
time.sleep(0.05)
adopted = adopt_orphans()
# a child that starts a long sleeper and exits at once: the sleeper is orphaned (as a Ray worker's forks are)
subprocess.run([sys.executable, "-c",
                "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])"],
               check=True, **quiet)
time.sleep(0.5)
orphans = descendants(since_ticks=started)
ended = end_descendants(since_ticks=started, grace_s=5)
left = descendants(since_ticks=started)
spared = earlier.poll() is None
earlier.kill()
print(json.dumps({"adopted": adopted, "orphans": orphans, "ended": ended, "left": left, "spared": spared,
                  "earlier": earlier.pid}))
'''


def test_an_orphaned_grandchild_is_adopted_and_ended_and_an_earlier_child_is_spared():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60,
                          cwd=dara.PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["adopted"] is True
    assert len(found["orphans"]) == 1 and found["earlier"] not in found["orphans"]  # only the run's orphan
    assert found["ended"] == found["orphans"]
    assert found["left"] == [] and found["spared"] is True
