"""Run the commands and snippets of a Markdown page, in order, as a reader
following it would (docs/contributing-docs.md is the guide for writers).

A page is cut into fenced blocks.  ``sh`` blocks run in bash, ``python``
blocks in a fresh interpreter each, every one from the page's own directory
and with what earlier blocks exported; a transcript (a block whose lines
start with ``$ ``) runs its ``$`` lines.  Anything else (output, diagrams,
configuration files) is text.  An HTML comment just before a block says more:

``<!-- doc: skip WHY -->``
    not run here (a second host, systemd, minutes of benchmark): counted,
    with the reason, in the page's summary.
``<!-- doc: fails -->``
    the block shows an error: it must exit non-zero.
``<!-- doc: before CODE -->``
    hidden lines run first, in the same language (placeholders the text
    leaves to the reader: a ``handle`` function, a file to append).

and one comment anywhere on the page, ``<!-- doc-page: cluster [logs]
[secure] [kafka] [nodes=N] -->``, starts ``logstrand dev up`` for it before
the first block and loads its ``DIR/env`` (two nodes unless ``nodes=N``);
with ``logs``, the cluster has
the README's development logs (1..100, and 200..215 named orders).
``<!-- doc-python: CODE -->`` is prepended to every Python block of the page.

What the runner changes, and only this: paths under ``/tmp/``,
``/var/lib/logstrand/`` and ``/etc/logstrand/`` become paths under the page's
temporary directory (pages run side by side, and again, and not as root);
``logstrand dev up`` and ``logstrand console`` run in the background until
the page ends, as in a second terminal, the block going on once they print
that they are ready; a Python block ends cleanly when ``handle`` (a
placeholder for the reader's code, defined by the page's hidden lines)
raises ``DocStop``, which is how a snippet that consumes forever is stopped.
A Python block with top-level ``await`` runs under asyncio, or under trio
when its hidden lines set ``DOC_ASYNC = "trio"``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_DIRECTIVE = re.compile(r"<!--\s*doc:\s*(skip|fails|before)\b(.*?)-->", re.S)
_PAGE = re.compile(r"<!--\s*doc-page:(.*?)-->", re.S)
_MOVED = re.compile(r"/tmp/|/var/lib/logstrand/|/etc/logstrand/")
_PY_PAGE = re.compile(r"<!--\s*doc-python:(.*?)-->", re.S)
#: Languages run as shell, and as Python; the rest is text.
SHELL = frozenset({"sh", "bash", "shell", "console"})
PYTHON = frozenset({"python", "py"})
#: One block's time: a command that hangs fails the page, never stalls CI.
BLOCK_TIMEOUT_S = 180.0
#: What ``dev up`` and the console get to say they are ready.
READY_TIMEOUT_S = 90.0


@dataclass
class Block:
    """One fenced block of a page."""

    line: int  # 1-based line of its opening fence
    lang: str
    text: str
    skip: str | None = None  # why it is not run
    fails: bool = False
    before: str = ""

    @property
    def kind(self) -> str:
        """'sh', 'python', 'transcript' (``$`` lines run) or 'text'."""
        if self.lang in SHELL:
            return "sh"
        if self.lang in PYTHON:
            return "python"
        if not self.lang and any(ln.startswith("$ ") for ln in self.text.splitlines()):
            return "transcript"
        return "text"

    @property
    def code(self) -> str:
        if self.kind == "transcript":
            return "\n".join(ln[2:] for ln in self.text.splitlines() if ln.startswith("$ "))
        return self.text


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    needs: frozenset[str] = frozenset()
    python_prelude: str = ""

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.kind != "text"]


def parse(path: Path) -> Page:
    """The page's blocks with their directives."""
    text = path.read_text()
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        body = "\n".join(
            ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j]
        )
        block = Block(i + 1, lang, body)
        # The directives: comments between the previous block (or text) and this fence.
        head = i - 1
        while head >= 0 and not lines[head].strip():
            head -= 1
        if head >= 0 and lines[head].strip().endswith("-->"):
            start = head
            while start >= 0 and "<!--" not in lines[start]:
                start -= 1
            comment = "\n".join(lines[start : head + 1])
            for d in _DIRECTIVE.finditer(comment):
                kind, arg = d.group(1), d.group(2)
                if kind == "skip":
                    block.skip = arg.strip() or "no reason given"
                elif kind == "fails":
                    block.fails = True
                else:
                    block.before = textwrap.dedent(arg).strip("\n")
        blocks.append(block)
        i = j + 1
    page = _PAGE.search(text)
    prelude = _PY_PAGE.search(text)
    return Page(
        path,
        blocks,
        frozenset(page.group(1).split()) if page else frozenset(),
        prelude.group(1).strip("\n") if prelude else "",
    )


@dataclass
class Outcome:
    ran: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)


class BlockFailed(AssertionError):
    pass


_SHELL_PRELUDE = r"""
set -eo pipefail
_doc_state="$DOC_STATE"
[ -f "$_doc_state/env.sh" ] && . "$_doc_state/env.sh"
trap 'export -p > "$_doc_state/env.sh"' EXIT
_doc_serve() {
    # A server the page starts (a second terminal, for a reader): in the
    # background until the page ends; on once it says it is ready.
    local n log ready='^ready '
    [ "$1" = console ] && ready='^console http'
    n=$(ls "$_doc_state" | grep -c '^serve\.' || true)
    log="$_doc_state/serve.$n.log"
    setsid logstrand "$@" > "$log" 2>&1 < /dev/null &
    echo $! >> "$_doc_state/pids"
    for _ in $(seq 1 $((DOC_READY_S * 10))); do
        if grep -qE "$ready" "$log"; then cat "$log"; return 0; fi
        if ! kill -0 $! 2>/dev/null; then cat "$log" >&2; return 1; fi
        sleep 0.1
    done
    echo "not ready after ${DOC_READY_S} s: logstrand $*" >&2; cat "$log" >&2; return 1
}
logstrand() {
    if [ "$1 $2" = "dev up" ] || [ "$1" = "console" ]; then _doc_serve "$@"
    # A node started with `&` must not hold the block's output open (the block
    # would never end); the page's end stops it with the block's process group.
    elif [ "$1" = node ]; then command logstrand "$@" >> "$_doc_state/nodes.log" 2>&1 < /dev/null
    else command logstrand "$@"; fi
}
"""

_PY_DRIVER = r"""
import ast, asyncio, os, sys
class DocStop(Exception):
    "Raised by a page's ``handle`` to end a snippet that would consume forever."
ns = {"__name__": "__doc__", "DocStop": DocStop}
# The hidden lines first, as plain code (they may block: a client of their own).
exec(compile(open(sys.argv[1]).read(), sys.argv[3] + " (hidden lines)", "exec"), ns)
source = open(sys.argv[2]).read()
code = compile(source, sys.argv[3], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
try:
    result = eval(code, ns)
    if asyncio.iscoroutine(result):
        if ns.get("DOC_ASYNC") == "trio":  # a snippet "from trio" (hidden lines say so)
            import trio

            async def main():
                return await result

            trio.run(main)
        else:
            asyncio.run(result)
except DocStop:
    pass
"""


class Runner:
    """Runs one page's blocks in order; ``close`` stops what they started."""

    def __init__(self, page: Page, tmp: Path) -> None:
        self.page = page
        self.tmp = tmp
        self.state = tmp / ".doc-state"
        self.state.mkdir(parents=True, exist_ok=True)
        #: What every block starts from: this process's environment without a
        #: cluster's; each block adds the shell's exports so far (to this,
        #: never to what an earlier block had: an `unset` must stick).
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOGSTRAND_")}
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
        env["DOC_STATE"] = str(self.state)
        env["DOC_READY_S"] = str(int(READY_TIMEOUT_S))
        env["COLUMNS"] = "160"  # tables as a terminal shows them, in failures
        self.base_env = env
        #: Process groups of the blocks run (their leaders' pids).
        self.groups: list[int] = []

    def localize(self, text: str) -> str:
        # One pass: a path put in must not be moved again (the page's own
        # directory is under /tmp too).
        def moved(m: re.Match[str]) -> str:
            where = m.group(0)
            return f"{self.tmp}/" if where == "/tmp/" else f"{self.tmp}{where}"

        return _MOVED.sub(moved, text)

    def run(self) -> Outcome:
        out = Outcome()
        needs = self.page.needs
        if "cluster" in needs:
            flags = [f"--{n}" for n in ("secure", "kafka") if n in needs]
            # Two nodes unless the page says: enough for R=2, and a third
            # node process per page is CPU the rest of `make test` needs.
            nodes = [n[6:] for n in needs if n.startswith("nodes=")] or ["2"]
            flags.append(f"--nodes {nodes[0]}")
            setup = [
                f"logstrand dev up --dir /tmp/page-cluster {' '.join(flags)}",
                ". /tmp/page-cluster/env",
            ]
            if "logs" in needs:
                setup += [
                    "logstrand logs create 1..100 --replication 2",
                    "logstrand logs create 200..215 --name orders --replication 2",
                ]
            self._shell(Block(0, "sh", "\n".join(setup)))
        for block in self.page.runnable:
            if block.skip is not None:
                out.skipped.append((block.line, block.skip))
                continue
            if block.kind == "python":
                self._python(block)
            else:
                self._shell(block)
            out.ran.append(block.line)
        return out

    def _where(self, block: Block) -> str:
        return f"{self.page.path.name}:{block.line}"

    def _check(self, block: Block, proc: subprocess.CompletedProcess[str]) -> None:
        failed = proc.returncode != 0
        if failed != block.fails:
            want = "to fail" if block.fails else "to succeed"
            raise BlockFailed(
                f"{self._where(block)} was expected {want}; exit {proc.returncode}\n"
                f"--- block ---\n{block.code}\n--- stdout ---\n{proc.stdout[-4000:]}\n"
                f"--- stderr ---\n{proc.stderr[-4000:]}"
            )

    def _shell(self, block: Block) -> None:
        # (The script sources the exports itself: see _SHELL_PRELUDE.)
        before = block.before + "\n" if block.before else ""
        script = _SHELL_PRELUDE + self.localize(before + block.code) + "\n"
        proc = self._spawn(["bash", "-c", script], block, self.base_env)
        self._check(block, proc)

    def _python(self, block: Block) -> None:
        hidden = "\n".join(p for p in (self.page.python_prelude, block.before) if p)
        setup = self.state / f"block{block.line}-hidden.py"
        setup.write_text(self.localize(hidden))
        path = self.state / f"block{block.line}.py"
        path.write_text(self.localize(block.code))
        driver = self.state / "driver.py"
        driver.write_text(_PY_DRIVER)
        argv = [sys.executable, str(driver), str(setup), str(path), self._where(block)]
        # The shell's exports so far are the snippet's environment.
        proc = self._spawn(argv, block, self._exported_env())
        self._check(block, proc)

    def _exported_env(self) -> dict[str, str]:
        exported = self.state / "env.sh"
        if not exported.exists():
            return self.base_env
        proc = subprocess.run(
            ["bash", "-c", f". {shlex.quote(str(exported))}; env -0"],
            capture_output=True,
            env=self.base_env,
            timeout=30,
        )
        return dict(item.split("=", 1) for item in proc.stdout.decode().split("\0") if "=" in item)

    def _spawn(
        self, argv: list[str], block: Block, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        # Each block leads a process group of its own: what it leaves running
        # in the background (``node ... &``) is stopped with it at the end.
        # Output goes to files, not pipes: a process the block leaves in the
        # background keeps its copy of them, and the block must still end.
        self.state.joinpath("env.sh").touch()
        out_path, err_path = self.state / "stdout", self.state / "stderr"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(
                argv,
                cwd=self.tmp,
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.groups.append(proc.pid)
        try:
            code = proc.wait(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise BlockFailed(
                f"{self._where(block)} ran over {BLOCK_TIMEOUT_S:.0f} s\n{block.code}\n"
                f"--- stdout ---\n{out_path.read_text()[-4000:]}\n"
                f"--- stderr ---\n{err_path.read_text()[-4000:]}"
            ) from None
        return subprocess.CompletedProcess(argv, code, out_path.read_text(), err_path.read_text())

    def close(self) -> None:
        """Stop every server the page started (SIGTERM, then SIGKILL), each
        with its process group (``dev up``'s nodes)."""
        pids_file = self.state / "pids"
        pids = [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []
        pids += self.groups
        for pid in pids:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # setsid: the group's id is the leader's pid


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)
    return waited == 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
