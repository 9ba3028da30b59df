"""A node's counters from its Prometheus endpoint, for the overview's rates:
one bounded GET of ``/metrics``, a few samples summed over their labels."""

from __future__ import annotations

import trio

#: The counters the overview charts (rates are computed by the page).
COUNTERS = {
    "logstrand_append_records_total": "append_records",
    "logstrand_append_bytes_total": "append_bytes",
    "logstrand_read_records_total": "read_records",
    "logstrand_store_records_total": "store_records",
}
RESPONSE_MAX = 8 << 20
#: An endpoint that did not answer is not asked again for this long (a
#: metrics port bound to another address than the node's must not cost
#: every status request its timeout).
QUIET_S = 30.0
_quiet_until: dict[tuple[str, int], float] = {}


async def node_counters(host: str, port: int, timeout_s: float) -> dict[str, float] | None:
    """The node's counters (None: it did not answer in time, or not as
    Prometheus does)."""
    if _quiet_until.get((host, port), 0.0) > trio.current_time():
        return None
    with trio.move_on_after(timeout_s):
        try:
            return parse_counters(await _get(host, port))
        except (OSError, ValueError):
            pass
    _quiet_until[(host, port)] = trio.current_time() + QUIET_S
    return None


async def _get(host: str, port: int) -> bytes:
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        request = f"GET /metrics HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n"
        await stream.send_all(request.encode())
        chunks, size = [], 0
        while chunk := await stream.receive_some(65536):
            size += len(chunk)
            if size > RESPONSE_MAX:
                raise ValueError("metrics page too big")
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
        raise ValueError("not an answer of 200")
    return body


def parse_counters(text: bytes) -> dict[str, float]:
    out = dict.fromkeys(COUNTERS.values(), 0.0)
    for line in text.decode("utf-8", "replace").splitlines():
        if not line or line[0] == "#":
            continue
        name, _, value = line.rpartition(" ")
        key = COUNTERS.get(name.split("{", 1)[0])
        if key is not None:
            out[key] += float(value)
    return out
