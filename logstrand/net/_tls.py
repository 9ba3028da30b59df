"""A TLS stream for framed connections: ``ssl.SSLObject`` over memory BIOs.

trio's ``SSLStream`` is general (renegotiation, https-compatible EOFs,
conflict detection on every call) and decrypts one ``SSLObject.read`` per
``receive_some``: at most one TLS record (16 KiB), with a retry loop and
locks in Python around each.  A node moves megabytes of framed messages per
second, so this stream does what a framed protocol needs and no more:

* ``receive_some`` feeds what the socket has (about ``max_bytes``) into the
  incoming BIO and takes the complete records out in one call, up to
  ``max_bytes`` of plaintext (a server reads only what its budget holds:
  ``_intake``; the rest waits in the BIO, a record at most);
* ``send_all`` encrypts the writer's joined frames with one ``write`` and
  sends the whole ciphertext with one ``send_all``;
* sends (the writer's, and the rare bytes TLS 1.3 writes while reading) go
  out under one lock, so ciphertext leaves in the order it was made;
* any TLS error is a ``trio.BrokenResourceError``; an end without
  close_notify is an end (the frames say whether a message was cut short).
"""

from __future__ import annotations

import contextlib
import ssl

import trio

READ_CHUNK = 1 << 20
RECEIVE_BYTES = 256 * 1024


class TlsStream(trio.abc.Stream):
    def __init__(
        self,
        transport: trio.SocketStream,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
    ) -> None:
        self.transport_stream = transport
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        self._send_lock = trio.Lock()
        self._eof = False

    def getpeercert(self) -> dict[str, object] | None:
        return self._tls.getpeercert()  # type: ignore[return-value]

    async def _flush(self) -> None:
        async with self._send_lock:
            if self._out.pending:
                await self.transport_stream.send_all(self._out.read())

    async def _refill(self, max_bytes: int = RECEIVE_BYTES) -> bool:
        # A little over the plaintext wanted: records carry some bytes more.
        data = await self.transport_stream.receive_some(min(RECEIVE_BYTES, max_bytes + 1024))
        if not data:
            self._in.write_eof()
            return False
        self._in.write(data)
        return True

    async def do_handshake(self) -> None:
        try:
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._flush()
                    if not await self._refill():
                        raise trio.BrokenResourceError("closed during the TLS handshake") from None
            await self._flush()
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(f"TLS handshake failed: {exc}") from exc

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self._send_lock:
            try:
                self._tls.write(data)
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS: {exc}") from exc
            await self.transport_stream.send_all(self._out.read())

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The bytes decrypted so far, at most ``max_bytes`` (at least one)."""
        limit = max_bytes or READ_CHUNK
        while True:
            chunks = []
            got = 0
            try:
                while got < limit:
                    chunk = self._tls.read(min(READ_CHUNK, limit - got))
                    if not chunk:
                        self._eof = True
                        break
                    chunks.append(chunk)
                    got += len(chunk)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                self._eof = True
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS: {exc}") from exc
            if chunks:
                return b"".join(chunks)
            if self._eof:
                return b""
            if self._out.pending:  # TLS 1.3 may answer while reading
                await self._flush()
            if not await self._refill(limit):
                return b""

    async def aclose(self) -> None:
        with contextlib.suppress(ssl.SSLError, ValueError):
            self._tls.unwrap()  # puts close_notify in the outgoing BIO
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            with trio.move_on_after(0.2):
                await self._flush()
        await self.transport_stream.aclose()
