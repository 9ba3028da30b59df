"""The tiered-storage options of ``logstrand node`` and the extension they
make (``tier.Tiering``; docs/tiered-storage.md)."""

from __future__ import annotations

from typing import Any

import typer

from ..errors import InvalidArgumentError
from ._common import duration_option, fail, keyword, size_option

TIER_OPTIONS = (
    keyword(
        "tier_url",
        str | None,
        None,
        typer.Option(
            help="s3://BUCKET/PREFIX: move the old records of logs with --tier-after there "
            "(credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or --tier-credentials)."
        ),
    ),
    keyword(
        "tier_endpoint",
        str | None,
        None,
        typer.Option(help="The S3 API's URL, for one that is not AWS (MinIO, moto)."),
    ),
    keyword(
        "tier_credentials",
        str | None,
        None,
        typer.Option(help="A file of KEY=VALUE lines with the AWS_* credentials."),
    ),
    keyword(
        "tier_cache",
        str,
        "256MiB",
        typer.Option(help="Bytes of tiered blocks the node keeps for readers."),
    ),
    keyword(
        "tier_interval",
        float,
        30.0,
        typer.Option(min=0.0, help="Seconds between offload rounds (0: none)."),
    ),
    keyword(
        "tier_object_size",
        str,
        "64MiB",
        typer.Option(help="About how large a tiered object grows."),
    ),
    keyword(
        "tier_orphan_age",
        str,
        "1h",
        typer.Option(
            help="Delete an object that no segment names (an upload cut short) once this old."
        ),
    ),
)


def tier_extension(params: dict[str, Any]) -> Any:
    """The node's tiering (None without --tier-url), every option checked."""
    url = params["tier_url"]
    if url is None:
        if params["tier_endpoint"] is not None or params["tier_credentials"] is not None:
            fail("--tier-endpoint and --tier-credentials need --tier-url")
        return None
    try:
        from ..tier import Tiering, TierOptions, TierTarget
    except ImportError:  # the 'tier' extra
        fail("--tier-url needs obstore: pip install 'logstrand[tier]'")
    try:
        target = TierTarget.parse(url, params["tier_endpoint"], params["tier_credentials"])
    except InvalidArgumentError as exc:
        fail(str(exc))
    cache = size_option(params["tier_cache"], "--tier-cache")
    size = size_option(params["tier_object_size"], "--tier-object-size")
    if size < 1024:
        fail("--tier-object-size: at least 1KiB")
    orphan_ms = duration_option(params["tier_orphan_age"], "--tier-orphan-age") or 0
    return Tiering(TierOptions(target, cache, params["tier_interval"], size, orphan_ms / 1000))
