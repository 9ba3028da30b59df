"""Which S3 client the tiered storage uses, by measurement (docs/tiered-storage.md).

Starts moto's S3 server on 127.0.0.1 (as the tests do), then times, for
boto3 and obstore alike: PUTs of 8 MiB objects, whole GETs of them, and
ranged GETs of 64 KiB at random offsets (what a reader's seek costs); and
for obstore, 4 MiB ranges in turn through a 64 MiB object (a node's reads
of a tiered log), then the same with 2 and 4 in flight at once.
Medians of ``--repeat`` rounds, in MB/s and ms.

    .venv/bin/python bench/tier_clients.py --repeat 5
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import statistics
import time

from logstrand.testing import MotoServer

OBJECT = 8 * 1024 * 1024
OBJECTS = 8
RANGE = 64 * 1024
RANGES = 64


def _boto3(endpoint: str, bucket: str) -> dict[str, float]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    body = os.urandom(OBJECT)
    t0 = time.perf_counter()
    for i in range(OBJECTS):
        s3.put_object(Bucket=bucket, Key=f"b/{i}", Body=body)
    put = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(OBJECTS):
        s3.get_object(Bucket=bucket, Key=f"b/{i}")["Body"].read()
    get = time.perf_counter() - t0
    rng = random.Random(1)
    t0 = time.perf_counter()
    for _ in range(RANGES):
        at = rng.randrange(OBJECT - RANGE)
        s3.get_object(Bucket=bucket, Key="b/0", Range=f"bytes={at}-{at + RANGE - 1}")["Body"].read()
    ranged = time.perf_counter() - t0
    return _figures(put, get, ranged)


def _obstore(endpoint: str, bucket: str) -> dict[str, float]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        bucket,
        endpoint=endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        client_options={"allow_http": True},
        virtual_hosted_style_request=False,
    )
    body = os.urandom(OBJECT)
    t0 = time.perf_counter()
    for i in range(OBJECTS):
        obstore.put(store, f"o/{i}", body)
    put = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(OBJECTS):
        obstore.get(store, f"o/{i}").bytes()
    get = time.perf_counter() - t0
    rng = random.Random(1)
    t0 = time.perf_counter()
    for _ in range(RANGES):
        at = rng.randrange(OBJECT - RANGE)
        obstore.get_range(store, "o/0", start=at, length=RANGE)
    ranged = time.perf_counter() - t0
    out = _figures(put, get, ranged)
    # What a node's reader of tiered records does: 4 MiB ranges in turn
    # through a 64 MiB object (what bench/tier.py's cold reads wait on).
    big = os.urandom(64 * 1024 * 1024)
    obstore.put(store, "o/big", big)
    t0 = time.perf_counter()
    for i in range(16):
        obstore.get_range(store, "o/big", start=i * 4 * 1024 * 1024, length=4 * 1024 * 1024)
    out["ranged_4MiB_of_64MiB_MBps"] = len(big) / (time.perf_counter() - t0) / 1e6
    # The same ranges, 2 and 4 in flight at once: whether more GETs at a
    # time (a deeper read-ahead) would read faster from this server.
    ranges = [i * 4 * 1024 * 1024 for i in range(16)]
    for streams in (2, 4):
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(streams) as pool:
            for at in ranges:
                pool.submit(obstore.get_range, store, "o/big", start=at, length=4 * 1024 * 1024)
        out[f"ranged_4MiB_x{streams}_MBps"] = len(big) / (time.perf_counter() - t0) / 1e6
    return out


def _figures(put: float, get: float, ranged: float) -> dict[str, float]:
    mb = OBJECT * OBJECTS / 1e6
    return {
        "put_MBps": mb / put,
        "get_MBps": mb / get,
        "ranged_get_ms": ranged / RANGES * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    rounds: dict[str, list[dict[str, float]]] = {"boto3": [], "obstore": []}
    with MotoServer() as moto:
        moto.create_bucket("bench")
        for _ in range(args.repeat):
            rounds["boto3"].append(_boto3(moto.endpoint, "bench"))
            rounds["obstore"].append(_obstore(moto.endpoint, "bench"))
    out = {
        name: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[-1]}
        for name, rs in rounds.items()
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
