"""Older Kafka clients against the Kafka front: kafka-python 2.0.2 and
aiokafka 0.10.0, which the project's own virtualenv cannot hold beside the
kafka-python 3 its tests use.

    .venv/bin/python tools/old_kafka_clients.py [--venv /tmp/logstrand-old-clients]

Makes (once) a virtualenv of its own with those two clients, starts a local
3-node cluster serving Kafka in plain mode and one in secure mode (SASL_SSL),
and runs with each client, in that virtualenv: topic creation through the
admin client (kafka-python), a gzip producer and a consumer group that reads
back and commits; in secure mode, a producer logging in with each SASL
mechanism (kafka-python 2.0.2 sends SaslHandshake v0 and then raw SASL
messages; aiokafka 0.10 takes v1).  Prints what each did and exits non-zero
if any failed.  It needs PyPI, so it is not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

CLIENTS = ("kafka-python==2.0.2", "aiokafka==0.10.0")

#: Runs in the old clients' virtualenv: argv[1] is a JSON of the cluster.
SCRIPT = r"""
import asyncio, json, ssl, sys, time
c = json.loads(sys.argv[1])
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
out = {}
base = dict(bootstrap_servers=c["bootstrap"])
if c["secure"]:
    base.update(security_protocol="SASL_SSL", ssl_cafile=c["ca"], ssl_check_hostname=False,
                sasl_plain_username="admin", sasl_plain_password=c["token"])
mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] if c["secure"] else [None]
topic = "old-%d" % int(time.time() * 1000)
for mech in mechanisms:
    kw = dict(base, sasl_mechanism=mech) if mech else dict(base)
    admin = KafkaAdminClient(**kw)
    if mech == mechanisms[0]:
        admin.create_topics([NewTopic(topic, 2, 2)])
    admin.close()
    p = KafkaProducer(compression_type="gzip", **kw)
    for i in range(10):
        p.send(topic, key=b"k%d" % i, value=b"v%d" % i).get(30)
    p.close()
    out["kafka-python 2.0.2 produce" + (" " + mech if mech else "")] = "ok"
kw = dict(base, sasl_mechanism=mechanisms[-1]) if c["secure"] else dict(base)
consumer = KafkaConsumer(topic, group_id="g-old", auto_offset_reset="earliest",
                         consumer_timeout_ms=10000, **kw)
got = 0
for _ in consumer:
    got += 1
    if got == 10 * len(mechanisms):
        break
consumer.commit()
consumer.close()
out["kafka-python 2.0.2 group consume"] = "%d of %d" % (got, 10 * len(mechanisms))

async def aio():
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    akw = dict(bootstrap_servers=c["bootstrap"])
    if c["secure"]:
        ctx = ssl.create_default_context(cafile=c["ca"])
        ctx.check_hostname = False
        akw.update(security_protocol="SASL_SSL", ssl_context=ctx, sasl_plain_username="admin",
                   sasl_plain_password=c["token"])
    for mech in mechanisms:
        mkw = dict(akw, sasl_mechanism=mech) if mech else akw
        p = AIOKafkaProducer(compression_type="gzip", **mkw)
        await p.start()
        for i in range(10):
            await p.send_and_wait(topic, b"a%d" % i, key=b"x%d" % i)
        await p.stop()
        out["aiokafka 0.10.0 produce" + (" " + mech if mech else "")] = "ok"
    co = AIOKafkaConsumer(topic, group_id="g-aio", auto_offset_reset="earliest", **mkw)
    await co.start()
    n = 0
    try:
        async def take():
            nonlocal n
            async for _ in co:
                n += 1
                if n == 20 * len(mechanisms):
                    return
        await asyncio.wait_for(take(), 30)
        await co.commit()
    finally:
        await co.stop()
    out["aiokafka 0.10.0 group consume"] = "%d of %d" % (n, 20 * len(mechanisms))

asyncio.run(aio())
print(json.dumps(out))
"""


def _venv(path: Path) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        venv.create(path, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *CLIENTS], check=True)
    return python


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/logstrand-old-clients"))
    args = ap.parse_args()
    python = _venv(args.venv)

    from logstrand.testing import LocalCluster

    failed = False
    for secure in (False, True):
        with (
            tempfile.TemporaryDirectory() as d,
            LocalCluster(f"{d}/c", nodes=3, kafka=True, secure=secure) as c,
        ):
            spec = {
                "bootstrap": c.kafka_bootstrap,
                "secure": secure,
                "token": c.admin_token,
                "ca": str(c.directory / "tls" / "ca.pem"),
            }
            done = subprocess.run(
                [str(python), "-c", SCRIPT, json.dumps(spec)],
                capture_output=True,
                text=True,
                timeout=300,
            )
        mode = "secure (SASL_SSL)" if secure else "plain"
        if done.returncode != 0:
            failed = True
            print(f"{mode}: FAILED\n{done.stderr[-3000:]}")
            continue
        for what, result in json.loads(done.stdout.strip().splitlines()[-1]).items():
            print(f"{mode}: {what}: {result}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
