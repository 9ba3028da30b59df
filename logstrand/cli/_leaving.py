"""The ``logstrand`` process's policy for SIGTERM (``_app.entry_point``).

A SIGTERM ends the process through ``SystemExit``, so that its atexit work
runs (the last log lines, a trace's marks), until the process is leaving:
then it is ignored.  A second SIGTERM that came while a node was shutting
down or after (a supervisor's; ``LocalCluster`` signals twice) killed the
exiting process with the default action, before that work: two of three
nodes of a cluster wrote no trace marks.  A node's own signal receiver takes
SIGTERM while it runs, says ``leaving()`` at the first, and puts this
handler back when it closes.  A Python handler, not SIG_IGN: children the
process starts do not inherit it, and a command run in-process (tests call
``main``) does not install it.

Until the very end: the interpreter's finalization, after the atexit
hooks, puts SIG_DFL back for every signal that has a Python handler (but
leaves SIG_IGN alone), and a SIGTERM in that last moment still killed a
node (-15: ``test_handoff``, once in a full run).  So the last atexit hook
sets SIG_IGN: no child is started after it.
"""

from __future__ import annotations

import atexit
import signal

_leaving = False


def leaving() -> None:
    """The process is on its way out: further SIGTERMs change nothing."""
    global _leaving
    _leaving = True


def _on_term(signum: int, _frame: object) -> None:
    if not _leaving:
        raise SystemExit(128 + signum)


def _ignore() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def install() -> None:
    # Registered first, so it runs last of this process's atexit hooks.
    atexit.register(_ignore)
    signal.signal(signal.SIGTERM, _on_term)
