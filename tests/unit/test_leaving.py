"""The ``logstrand`` process's SIGTERM policy (``cli/_leaving.py``) at the
very end of the process, where a test of a whole cluster met it once."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import atexit, os, signal

def last():
    # Registered before install(), so it runs after its hook (atexit is
    # last in, first out): what finalization then finds.
    # (A SIGTERM sent from here would meet the Python handler, not what
    # finalization leaves: the disposition is what tells.)
    os._exit(0 if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN else 3)

atexit.register(last)
from logstrand.cli import _leaving
_leaving.install()
"""


def test_a_sigterm_after_the_atexit_hooks_is_ignored() -> None:
    """Finalization puts SIG_DFL back for a signal with a Python handler
    (and leaves SIG_IGN): the last atexit hook must leave SIG_IGN, or a
    SIGTERM then kills the process (-15) however cleanly it was exiting."""
    done = subprocess.run([sys.executable, "-c", _PROBE], timeout=60, check=False)
    assert done.returncode == 0


def test_a_sigterm_while_running_ends_the_process_through_its_exit_work() -> None:
    code = (
        "import atexit, os, signal, time\n"
        "from logstrand.cli import _leaving\n"
        "_leaving.install()\n"
        "atexit.register(lambda: print('exit work done', flush=True))\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(30)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], timeout=60, check=False, capture_output=True, text=True
    )
    assert done.returncode == 128 + 15
    assert "exit work done" in done.stdout
