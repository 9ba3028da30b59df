"""A whole node, in process, for stateful fuzzing of its dispatch.

``NodeHarness`` runs one real ``Node`` (SQLite epoch store, RocksDB, the
cleaner, every part) on a trio loop in a thread of its own, for the life of
the process: state accumulates across inputs, as on a node that lives for
days.  Each input is one *session*: a connection straight into the node's
server (``Server._serve_conn``, the path an accepted socket takes after its
handshake: intake, guard, dispatch, handlers), as a client or as another
node, fed a *valid prefix* (a sequence of well-formed requests that brings
the node into a state: a sequencer running, records stored and released,
read streams open, a compacted log) and then the input's own bytes (the
*tail*, which the fuzzer mutates).  The session ends with a Ping, so its
frames have all been dispatched when the Pong comes.

After each session: the node must still answer on a fresh session, no
part may have logged a failure (a handler or a background task that raised
something that was not a ``LogstrandError``), and the records the harness
appended itself (log 1, acknowledged) must still read back as appended.
"""

from __future__ import annotations

import functools
import logging
import struct
import tempfile
import threading
import time
from typing import Any

import trio
import trio.testing

from logstrand.batch import Codec, PackedBatch, make_batch
from logstrand.epochstore import LogAttributes, NodeConfig, open_epoch_store
from logstrand.errors import Status
from logstrand.net import Connection, ConnLimits
from logstrand.security import TRUSTED
from logstrand.storage import Node, NodeOptions
from logstrand.testing import free_port
from logstrand.wire import (
    Append,
    AppendReply,
    CleanPoint,
    DropCopies,
    FindTime,
    FrameDecoder,
    GetClusterState,
    GetDigest,
    GetLogDirectory,
    GetNodeStatus,
    GetSeqState,
    Gossip,
    GroupHeartbeat,
    LogInfo,
    Ping,
    Pong,
    ReadCredit,
    Release,
    Seal,
    StartRead,
    StopRead,
    Store,
    Trim,
    TrimLog,
    TxnOp,
    TxnRequest,
    encode_frame,
)

#: Log 1: the harness's own acknowledged records; 2: plain; 3: compacted.
PLAIN, COMPACTED = 2, 3
SESSION_S = 5.0


def _append(rid: int, log: int, n: int, key: bytes | None = None) -> Append:
    payloads: list[bytes | None] = [b"p%d" % i for i in range(n)]
    keys = [key] * n
    return Append(rid, log, PackedBatch.for_append(keys, payloads, Codec.NONE, None))


def _prefixes(epoch: int) -> list[list[Any]]:
    """Valid sequences of requests; an input's first byte picks one."""
    lsn = (epoch << 32) | 1
    forged = make_batch([(epoch << 32) | 100_000], [b"x"], timestamps_ms=1)
    return [
        [],
        [_append(11, PLAIN, 3), _append(12, PLAIN, 2), GetSeqState(13, PLAIN)],
        [StartRead(1, 1, 1, 1, 2**64 - 1, 100, False, ()), ReadCredit(1, 1, 50)],
        [StartRead(2, 1, PLAIN, 1, 2**64 - 1, 10, True, (2,)), StopRead(2)],
        [_append(21, COMPACTED, 2, b"k"), DropCopies(22, COMPACTED, lsn, 0, 0, 0, b"")],
        [CleanPoint(COMPACTED, lsn), LogInfo(31, 1), GetLogDirectory(32, PLAIN)],
        [FindTime(41, 1, 0), Trim(42, PLAIN, 0), TrimLog(43, PLAIN, 0)],
        [Seal(51, PLAIN, epoch - 1), GetDigest(52, PLAIN, epoch - 1, 1, epoch)],
        [Store.of(61, PLAIN, 7, (1,), 0, False, forged), Release(PLAIN, lsn)],
        [GetNodeStatus(71), GetClusterState(72), Gossip(2, (1, 0, 2, 0), True)],
        # The coordinators (``NodeGroups``): a transactional id's producer,
        # a log added, an operator's abort; a member joining a group.
        [
            TxnRequest(81, TxnOp.INIT, "fuzz-txn", timeout_ms=60_000),
            TxnRequest(82, TxnOp.ADD, "fuzz-txn", 1000, 0, logs=(PLAIN,), groups=("g",)),
            TxnRequest(83, TxnOp.FORCE_ABORT, "fuzz-txn"),
        ],
        [GroupHeartbeat(91, "fuzz-group", "", 0, None, True, (PLAIN,), None)],
    ]


class NodeHarness:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="logstrand-fuzz-")
        self.url = f"sqlite://{self.dir}/cluster.db"
        with open_epoch_store(self.url, create=True) as store:
            store.add_node(NodeConfig(1, f"127.0.0.1:{free_port()}", data_dir=f"{self.dir}/n1"))
            # Node 2 never runs: it is the peer a session may speak as.
            store.add_node(
                NodeConfig(2, f"127.0.0.1:{free_port()}", roles=("sequencer",), data_dir="")
            )
            store.create_logs(1, PLAIN, LogAttributes(replication_factor=1, nodeset_size=1))
            store.create_logs(
                COMPACTED,
                COMPACTED,
                LogAttributes(replication_factor=1, nodeset_size=1, cleanup_policy="compact"),
            )
        self.failures: list[str] = []
        self.inputs = 0
        logging.getLogger("logstrand").addHandler(_Catch(self.failures))
        logging.getLogger("logstrand").setLevel(logging.WARNING)
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="node")
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the node did not start")
        self.acked = self.call(self._append_own)
        self.epoch = self.acked[0] >> 32
        self.prefixes = _prefixes(self.epoch)

    # -- the node's thread -------------------------------------------------------

    def _run(self) -> None:
        trio.run(self._main)

    async def _main(self) -> None:
        from logstrand.compaction._cleaner import Cleaner, CleanerOptions
        from logstrand.groups._node import NodeGroups

        options = NodeOptions(sequencer_hold_down_s=0.0, idle_s=30.0)
        self.node = Node(
            self.url,
            1,
            options=options,
            extensions=(Cleaner(CleanerOptions(interval_s=0)), NodeGroups()),
        )
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.node.run)
            self._ready.set()

    def call(self, fn: Any, *args: Any) -> Any:
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    # -- sessions ------------------------------------------------------------------

    async def session(
        self, frames: bytes, as_node: bool, until: int = 0, *, hang_up: bool = False
    ) -> list[Any]:
        """Feed ``frames`` through a connection into the node's server; the
        replies that came before the closing Pong (and at least ``until``
        replies other than it).  ``hang_up``: close the sending side after
        the frames (a frame the tail leaves unfinished ends there)."""
        client, server = trio.testing.memory_stream_pair()
        conn = Connection(server, peer="fuzz", limits=ConnLimits(idle_s=30.0))
        conn.principal = TRUSTED
        conn.peer_node_id = 2 if as_node else None
        replies: list[Any] = []
        with trio.move_on_after(SESSION_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.node.server._serve_conn, conn, None)
                await client.send_all(frames + encode_frame(Ping(2**63)))
                if hang_up:
                    await client.send_stream.aclose()
                decoder = FrameDecoder()
                while True:
                    data = await client.receive_some(1 << 16)
                    if not data:
                        break
                    decoder.feed(data)
                    msgs = decoder.messages()
                    replies += msgs
                    done = any(isinstance(m, Pong) and m.request_id == 2**63 for m in replies)
                    if done and len(replies) > until:
                        break
                await client.aclose()
        return replies

    async def _append_own(self) -> list[int]:
        msgs = b"".join(encode_frame(_append(i + 1, 1, 5)) for i in range(3))
        replies = await self.session(msgs, False, until=3)
        got = [r for r in replies if isinstance(r, AppendReply)]
        assert len(got) == 3, got
        assert all(r.status == Status.OK for r in got), got
        return sorted(r.first_lsn + i for r in got for i in range(r.count))

    def one(self, data: bytes) -> None:
        """One fuzz input: a prefix (its first byte), then its bytes."""
        if not data:
            return
        prefix = self.prefixes[data[0] % len(self.prefixes)]
        as_node = bool(data[0] & 0x80)
        frames = b"".join(encode_frame(m) for m in prefix) + data[1:]
        self.call(functools.partial(self.session, frames, as_node, hang_up=True))
        self.inputs += 1
        self.check(read=self.inputs % 10 == 0)

    def check(self, *, read: bool = True) -> None:
        if self.failures:
            raise AssertionError("a part of the node failed:\n" + "\n".join(self.failures))
        replies = self.call(self.session, b"", False)
        assert any(isinstance(r, Pong) for r in replies), "the node no longer answers"
        if not read:
            return
        # The harness's own records read back (trims go to log 2, not 1).
        read = StartRead(9, 1, 1, self.acked[0], self.acked[-1], 1000, False, ())
        replies = self.call(self.session, encode_frame(read), False)
        got = [lsn for r in replies if type(r).__name__ == "ReadRecords" for lsn in _lsns(r)]
        assert set(self.acked) <= set(got) or _still_coming(replies), "acknowledged records lost"


def _lsns(reply: Any) -> list[int]:
    out: list[int] = []
    for batch in reply.batches:
        out += batch.lsns()
    return out


def _still_coming(replies: list[Any]) -> bool:
    """The read stream was cut by the session's end before all came (a slow run)."""
    return not any(type(r).__name__ == "ReadRecords" for r in replies)


class _Catch(logging.Handler):
    """Keeps what the node logged as a failure (with a traceback)."""

    def __init__(self, failures: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.failures = failures

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.failures.append(self.format(record))


def seeds() -> list[bytes]:
    """A seed corpus: each prefix alone, as a client and as a node, and with a
    well-formed tail (a second round of the same)."""
    out = []
    for i in range(len(_prefixes(1))):
        for flag in (0, 0x80):
            out.append(bytes([i | flag]))
            out.append(bytes([i | flag]) + encode_frame(_append(99, PLAIN, 1)))
    out.append(bytes([1]) + struct.pack(">I", 5) + b"\x85\x01\x01\x02\x03\x04")
    return out


if __name__ == "__main__":
    h = NodeHarness()
    t0 = time.monotonic()
    for s in seeds():
        h.one(s)
    print(f"{len(seeds())} seeds in {time.monotonic() - t0:.2f} s; failures: {h.failures}")
