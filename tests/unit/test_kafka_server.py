"""The Kafka front's listener with a fake front: answers in request order,
bad frames and slow peers cut off, connections and bytes bounded (bytes
counted as they arrive, decoded items as they are made), and, in secure
mode, nothing but SASL decoded before a login."""

from __future__ import annotations

import socket
import struct
from typing import Any, ClassVar

import trio

from logstrand.kafka import _protocol as proto
from logstrand.kafka._codec import ITEM_BYTES
from logstrand.kafka._server import Limits, serve_kafka


class _Front:
    """Answers Metadata with the correlation id in the cluster id, after a
    pause the request's first topic name gives (in ms)."""

    served: ClassVar[dict[int, tuple[int, int]]] = {3: (0, 12), 18: (0, 3)}
    secure = False

    async def handle(self, request: proto.Request) -> bytes | None:
        if request.api_key == 18:  # ApiVersions: a login, on the fake's terms
            request.conn.user = "ann"
            body = {"error_code": 0, "api_keys": []}
            return proto.encode_response(18, request.version, request.correlation_id, body)
        if request.client_id == "last":
            request.conn.closing = True
        topics = request.body["topics"] or []
        if topics:
            await trio.sleep(int(topics[0]["name"]) / 1000)
        body = {"brokers": [], "cluster_id": str(request.correlation_id), "topics": []}
        return proto.encode_response(3, request.version, request.correlation_id, body)

    def unsupported(self, exc: proto.UnsupportedRequest) -> bytes | None:
        return None


async def _closed(stream: trio.SocketStream) -> bool:
    """The front closed it (an end of stream, or a reset for bytes it left unread)."""
    try:
        return await stream.receive_some(10) == b""
    except trio.BrokenResourceError:
        return True


async def _start(limits: Limits, nursery: trio.Nursery) -> int:
    port: int = await nursery.start(serve_kafka, _Front(), "127.0.0.1", 0, limits)
    return port


async def _read_answer(stream: trio.SocketStream) -> dict[str, Any] | None:
    buf = b""
    while len(buf) < 4:
        chunk = await stream.receive_some(4 - len(buf))
        if not chunk:
            return None
        buf += chunk
    (size,) = struct.unpack(">i", buf)
    frame = b""
    while len(frame) < size:
        frame += await stream.receive_some(size - len(frame))
    return proto.decode_response(3, 12, frame)[1]


async def test_pipelined_requests_are_answered_in_the_order_asked() -> None:
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(), nursery)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        # The first takes longest; each answer still comes in request order.
        for corr, pause in ((1, 200), (2, 0), (3, 50)):
            body = {"topics": [{"name": str(pause)}]}
            await stream.send_all(proto.encode_request(3, 12, corr, body))
        got = [(await _read_answer(stream)) for _ in range(3)]
        assert [a["cluster_id"] for a in got if a] == ["1", "2", "3"]
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_a_frame_that_trickles_in_is_cut_off_and_others_go_on() -> None:
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(frame_grace_s=0.3), nursery)
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        await slow.send_all(struct.pack(">i", 1000) + b"\x00\x03")  # and then nothing
        with trio.fail_after(5):
            assert await _closed(slow)  # after frame_s
        ok = await trio.open_tcp_stream("127.0.0.1", port)
        await ok.send_all(proto.encode_request(3, 12, 9, {"topics": None}))
        answer = await _read_answer(ok)
        assert answer is not None
        assert answer["cluster_id"] == "9"
        for s in (slow, ok):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_connections_past_the_bound_are_closed_at_once() -> None:
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(connections_max=2), nursery)
        kept = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        await trio.sleep(0.1)
        extra = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(5):
            assert await _closed(extra)
        await kept[0].send_all(proto.encode_request(3, 12, 4, {"topics": None}))
        answer = await _read_answer(kept[0])
        assert answer is not None
        assert answer["cluster_id"] == "4"
        for s in (*kept, extra):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_requests_wait_for_the_byte_budget_not_for_memory() -> None:
    """Two requests of 600 bytes against a budget of 1,000 (and an allowance
    of 100): the second is read whole only once the first is handled; both
    are answered."""
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(budget_bytes=1000, allowance=100), nursery)
        a = await trio.open_tcp_stream("127.0.0.1", port)
        b = await trio.open_tcp_stream("127.0.0.1", port)
        pad = [{"name": "x" * 50} for _ in range(10)]
        await a.send_all(proto.encode_request(3, 12, 1, {"topics": [{"name": "300"}, *pad]}))
        await trio.sleep(0.05)
        t0 = trio.current_time()
        await b.send_all(proto.encode_request(3, 12, 2, {"topics": [{"name": "0"}, *pad]}))
        second = await _read_answer(b)
        assert second is not None
        assert second["cluster_id"] == "2"
        assert trio.current_time() - t0 > 0.2  # it waited for the first's bytes
        first = await _read_answer(a)
        assert first is not None
        assert first["cluster_id"] == "1"
        for s in (a, b):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_a_connection_s_requests_are_handled_one_after_another() -> None:
    """Kafka's promise, which keeps two Produce requests of one connection
    to one partition in order: the second is not handled before the first
    is done (handled side by side, trio could start either first)."""
    spans: list[tuple[int, float, float]] = []

    class _Timed(_Front):
        async def handle(self, request: proto.Request) -> bytes | None:
            t0 = trio.current_time()
            answer = await super().handle(request)
            spans.append((request.correlation_id, t0, trio.current_time()))
            return answer

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_kafka, _Timed(), "127.0.0.1", 0, Limits())
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        for corr, pause in ((1, 100), (2, 0)):
            await stream.send_all(
                proto.encode_request(3, 12, corr, {"topics": [{"name": str(pause)}]})
            )
        for _ in range(2):
            assert await _read_answer(stream) is not None
        await stream.aclose()
        nursery.cancel_scope.cancel()
    (c1, _, end1), (c2, start2, _) = sorted(spans)
    assert (c1, c2) == (1, 2)
    assert start2 >= end1


async def test_a_peer_that_resets_its_connection_takes_nothing_else_down() -> None:
    """A client killed mid-request: its connection is reset under the
    reader and the writer alike; the listener goes on serving others."""
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(), nursery)
        for pause in (0, 200):
            gone = await trio.open_tcp_stream("127.0.0.1", port)
            # An answer on its way (after ``pause``) and unread bytes at the
            # close make the kernel reset the connection, as for a killed client.
            await gone.send_all(proto.encode_request(3, 12, 1, {"topics": [{"name": str(pause)}]}))
            await trio.sleep(0.1)
            gone.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await gone.aclose()
            await trio.sleep(0.3)
        ok = await trio.open_tcp_stream("127.0.0.1", port)
        await ok.send_all(proto.encode_request(3, 12, 7, {"topics": None}))
        with trio.fail_after(5):
            answer = await _read_answer(ok)
        assert answer is not None
        assert answer["cluster_id"] == "7"
        await ok.aclose()
        nursery.cancel_scope.cancel()


async def test_sizes_with_nothing_behind_them_hold_nothing() -> None:
    """Connections that send only a size (the whole budget's worth, and more)
    take no budget: a request of another client is answered at once."""
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(budget_bytes=100_000), nursery)
        claims = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
        for s in claims:
            await s.send_all(struct.pack(">i", 90_000))
        await trio.sleep(0.1)
        ok = await trio.open_tcp_stream("127.0.0.1", port)
        await ok.send_all(proto.encode_request(3, 12, 5, {"topics": None}))
        with trio.fail_after(2):
            answer = await _read_answer(ok)
        assert answer is not None
        assert answer["cluster_id"] == "5"
        for s in (*claims, ok):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_a_connection_that_stops_in_a_frame_is_cut() -> None:
    """Half a frame and then nothing: cut after ``frame_grace_s``, not at the
    frame's deadline (its size at the minimum rate)."""
    async with trio.open_nursery() as nursery:
        limits = Limits(frame_grace_s=0.3, frame_min_rate=1)  # the deadline: ~1,000 s
        port = await _start(limits, nursery)
        s = await trio.open_tcp_stream("127.0.0.1", port)
        await s.send_all(struct.pack(">i", 1000) + b"\x00" * 500)
        with trio.fail_after(3):
            assert await _closed(s)
        await s.aclose()
        nursery.cancel_scope.cancel()


async def test_before_a_login_only_small_sasl_frames_are_read() -> None:
    """In secure mode, a frame over ``unauthenticated_frame_max`` or of an API
    other than ApiVersions and SASL ends the connection before it is read
    (or decoded); after the login the same request is answered."""

    class _Secure(_Front):
        secure = True

    async with trio.open_nursery() as nursery:
        limits = Limits(unauthenticated_frame_max=1000)
        port = await nursery.start(serve_kafka, _Secure(), "127.0.0.1", 0, limits)
        big = await trio.open_tcp_stream("127.0.0.1", port)
        await big.send_all(struct.pack(">i", 1001))
        with trio.fail_after(2):
            assert await _closed(big)
        early = await trio.open_tcp_stream("127.0.0.1", port)
        await early.send_all(proto.encode_request(3, 12, 1, {"topics": None}))
        with trio.fail_after(2):
            assert await _closed(early)
        ok = await trio.open_tcp_stream("127.0.0.1", port)
        body = {"client_software_name": "t", "client_software_version": "1"}
        await ok.send_all(proto.encode_request(18, 3, 1, body))
        await ok.send_all(proto.encode_request(3, 12, 2, {"topics": None}))
        head = await ok.receive_some(4)
        (size,) = struct.unpack(">i", head)
        rest = b""
        while len(rest) < size:
            rest += await ok.receive_some(size - len(rest))
        answer = await _read_answer(ok)
        assert answer is not None
        assert answer["cluster_id"] == "2"
        for s in (big, early, ok):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_decoded_items_count_against_their_budget_and_their_bound() -> None:
    """Two requests of 1,500 topics with room for 2,000 decoded: the second
    waits until the first is answered, then is decoded and answered; one
    past ``items_max`` ends its connection."""
    first = [{"name": "300"}] + [{"name": "0"} for _ in range(1499)]
    second = [{"name": "0"} for _ in range(1500)]
    async with trio.open_nursery() as nursery:
        limits = Limits(decoded_bytes=2000 * ITEM_BYTES, items_max=5000)
        port = await _start(limits, nursery)
        a = await trio.open_tcp_stream("127.0.0.1", port)
        b = await trio.open_tcp_stream("127.0.0.1", port)
        await a.send_all(proto.encode_request(3, 12, 1, {"topics": first}))
        await trio.sleep(0.05)
        t0 = trio.current_time()
        await b.send_all(proto.encode_request(3, 12, 2, {"topics": second}))
        with trio.fail_after(5):
            answer = await _read_answer(b)
        assert answer is not None
        assert answer["cluster_id"] == "2"
        assert trio.current_time() - t0 > 0.2  # it waited for the first's items
        assert await _read_answer(a) is not None
        over = await trio.open_tcp_stream("127.0.0.1", port)
        await over.send_all(proto.encode_request(3, 12, 3, {"topics": second * 4}))
        with trio.fail_after(5):
            assert await _closed(over)
        for s in (a, b, over):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_an_answer_after_which_the_connection_must_end_goes_out_first() -> None:
    async with trio.open_nursery() as nursery:
        port = await _start(Limits(), nursery)
        s = await trio.open_tcp_stream("127.0.0.1", port)
        frame = proto.encode_request(3, 12, 3, {"topics": None}, client_id="last")
        await s.send_all(frame + proto.encode_request(3, 12, 4, {"topics": None}))
        with trio.fail_after(5):
            answer = await _read_answer(s)
            assert answer is not None
            assert answer["cluster_id"] == "3"
            assert await _closed(s)  # and nothing for the request after it
        await s.aclose()
        nursery.cancel_scope.cancel()
