"""The object store a node tiers to: an S3 API at ``--tier-url
s3://BUCKET/PREFIX`` (``--tier-endpoint`` for one that is not AWS), through
obstore (bench/tier_clients.py says why), and the reader that seeks in a
tiered object (``_format``).

obstore's calls block (they run in a Rust thread pool and release the
GIL); the node calls them from worker threads (``trio.to_thread``), so the
event loop never waits on the object store.  Credentials come as for any S3
client: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (and
``AWS_SESSION_TOKEN``), or ``--tier-credentials FILE`` with those lines.

Errors are two kinds here: ``ObjectMissing`` (the key is not there: a
reader turns it into a DATALOSS gap naming the object) and
``ObjectStoreError`` (anything else: unreachable, refused, slow past the
timeout; callers retry with backoff).  A corrupt object is ``_format``'s
``CorruptObject``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import urllib.parse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import InvalidArgumentError
from . import _steps as steps
from ._format import (
    Entry,
    blocks_from,
    entries_from,
    parse_block,
)
from ._steps import Opened, run_now

if TYPE_CHECKING:
    from collections.abc import Mapping


class ObjectStoreError(Exception):
    """The object store did not do what was asked (a caller retries)."""


class ObjectMissing(ObjectStoreError):
    """The object is not in the store."""


@attrs.frozen
class TierTarget:
    """Where a node tiers to, from ``--tier-url``, ``--tier-endpoint`` and
    the credentials."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str = "us-east-1"
    credentials: Mapping[str, str] = attrs.field(factory=dict, repr=False)

    @classmethod
    def parse(
        cls,
        url: str,
        endpoint: str | None = None,
        credentials_file: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> TierTarget:
        """``s3://BUCKET[/PREFIX]``; credentials from ``credentials_file``
        (``KEY=VALUE`` lines) or the AWS variables of ``env``."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
            raise InvalidArgumentError(f"--tier-url: s3://BUCKET/PREFIX, not {url!r}")
        if endpoint is not None and urllib.parse.urlsplit(endpoint).scheme not in (
            "http",
            "https",
        ):
            raise InvalidArgumentError(f"--tier-endpoint: an http(s) URL, not {endpoint!r}")
        source = dict(os.environ if env is None else env)
        if credentials_file is not None:
            try:
                lines = Path(credentials_file).read_text().splitlines()
            except OSError as exc:
                raise InvalidArgumentError(f"--tier-credentials: {exc}") from exc
            source = dict(line.split("=", 1) for line in lines if "=" in line)
        names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
        creds = {k: source[k].strip() for k in names if source.get(k)}
        region = source.get("AWS_REGION") or source.get("AWS_DEFAULT_REGION") or "us-east-1"
        return cls(parts.netloc, parts.path.strip("/"), endpoint, region, creds)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name


class ObjectStore:
    """One bucket (and prefix) of an S3 API; every call blocks."""

    def __init__(self, target: TierTarget, timeout_s: float = 30.0) -> None:
        from obstore.store import S3Store  # the 'tier' extra: only where it is used

        self.target = target
        config: dict[str, Any] = {"region": target.region}
        creds = target.credentials
        if "AWS_ACCESS_KEY_ID" in creds:
            config["access_key_id"] = creds["AWS_ACCESS_KEY_ID"]
            config["secret_access_key"] = creds.get("AWS_SECRET_ACCESS_KEY", "")
        if "AWS_SESSION_TOKEN" in creds:
            config["session_token"] = creds["AWS_SESSION_TOKEN"]
        if target.endpoint is not None:
            config["endpoint"] = target.endpoint
            # Path-style requests: what an endpoint of one's own serves
            # (moto, MinIO); AWS itself takes both.
            config["virtual_hosted_style_request"] = False
        self._store = S3Store(
            target.bucket,
            **config,
            client_options={
                "allow_http": target.endpoint is not None and target.endpoint.startswith("http:"),
                "timeout": f"{int(timeout_s)}s",
                "connect_timeout": "5s",
            },
            # A call gives up within ``timeout_s`` whatever the store does
            # (obstore's own default retries for 3 minutes): the offload's
            # next round is the retry, and a reader asks another node.
            retry_config={"max_retries": 3, "retry_timeout": datetime.timedelta(seconds=timeout_s)},
        )

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import obstore.exceptions as oe

        try:
            return fn(self._store, *args, **kwargs)
        except FileNotFoundError as exc:
            raise ObjectMissing(str(exc)) from exc
        except oe.NotFoundError as exc:
            raise ObjectMissing(str(exc)) from exc
        except (oe.BaseError, OSError) as exc:
            raise ObjectStoreError(f"{type(exc).__name__}: {exc}") from exc

    def put(self, name: str, data: bytes) -> None:
        import obstore

        self._call(obstore.put, self.target.key(name), data)

    def size(self, name: str) -> int:
        """The object's length (``ObjectMissing`` if it is not there)."""
        import obstore

        meta = self._call(obstore.head, self.target.key(name))
        return int(meta["size"])

    def read(self, name: str, start: int, length: int) -> bytes:
        import obstore

        data = self._call(obstore.get_range, self.target.key(name), start=start, length=length)
        return bytes(data)

    def delete(self, name: str) -> None:
        """Delete the object (one that is not there is deleted already)."""
        import obstore

        with contextlib.suppress(ObjectMissing):
            self._call(obstore.delete, self.target.key(name))

    def names(self, under: str = "") -> list[str]:
        """The names of the objects under ``under`` (below the prefix)."""
        return [name for name, _ in self.listing(under)]

    def listing(self, under: str = "") -> list[tuple[str, float]]:
        """The names of the objects under ``under`` (below the prefix), each
        with when it was last written (seconds since the epoch)."""
        import obstore

        base = self.target.key(under) if under else self.target.prefix
        skip = len(self.target.prefix) + 1 if self.target.prefix else 0

        def pages(store: Any) -> list[tuple[str, float]]:
            # The listing is lazy: its requests (and their errors) happen
            # while it is walked, so the walk is inside ``_call``.
            return [
                (str(meta["path"])[skip:], meta["last_modified"].timestamp())
                for chunk in obstore.list(store, base or None)
                for meta in chunk
            ]

        return self._call(pages)  # type: ignore[no-any-return]


def open_object(store: ObjectStore, name: str, size: int) -> Opened:
    """Read ``name``'s footer and index (two ranged reads), blocking."""
    return run_now(steps.open_object(name, size), partial(perform_blocking, store))  # type: ignore[no-any-return]


def perform_blocking(store: ObjectStore, cmd: Any) -> Any:
    """An ``ObjectCall`` on ``store``, in the caller's thread."""
    assert isinstance(cmd, steps.ObjectCall), cmd
    return getattr(store, cmd.method)(*cmd.args)


def read_from(store: ObjectStore, opened: Opened, lsn: int, max_bytes: int) -> list[Entry]:
    """The object's entries from ``lsn`` on: the blocks from the one that
    holds it, read in one ranged read of at least one block and at most
    ``max_bytes`` (more blocks are the read-ahead)."""
    index = opened.index
    first = blocks_from(index, lsn)
    if first == len(index):
        return []
    last = first
    while last + 1 < len(index) and (
        index[last + 1].offset + index[last + 1].length - index[first].offset <= max_bytes
    ):
        last += 1
    start = index[first].offset
    data = store.read(opened.name, start, index[last].offset + index[last].length - start)
    out: list[Entry] = []
    for row in index[first : last + 1]:
        out += parse_block(data[row.offset - start : row.offset - start + row.length], row)
    return entries_from(out, lsn)
