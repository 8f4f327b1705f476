"""Read agentledger's published events with the CloudEvents Python SDK.

    read_published.py kafka BOOTSTRAP TOPIC COUNT   consume TOPIC from the beginning
                                                    until COUNT records (60 s at most)
    read_published.py lines                         one structured event per stdin line

Prints one JSON object: every event as the SDK parsed it (attributes, data),
and for Kafka records also the record's key, its headers and the attributes
the SDK reads from the `ce_` headers alone (binary mode), so the caller can
hold the two to each other. Exits non-zero when the SDK refuses a record.
"""

import json
import sys
import time

from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.formats.json import JSONFormat


def attributes(event):
    out = {}
    for k, v in event.get_attributes().items():
        out[k] = v.isoformat() if hasattr(v, "isoformat") else v
    return out


def from_kafka(bootstrap, topic, count):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"cloudevents-reader-{time.time_ns()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    c.subscribe([topic])
    events = []
    deadline = time.time() + 60
    while len(events) < count and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise SystemExit(f"kafka error: {m.error()}")
        headers = {k: v for k, v in (m.headers() or [])}
        msg = ce_kafka.KafkaMessage(headers=headers, key=m.key(), value=m.value())
        structured = ce_kafka.from_structured(msg, JSONFormat())
        binary = ce_kafka.from_binary(msg, JSONFormat())
        events.append({
            "partition": m.partition(),
            "offset": m.offset(),
            "key": m.key().decode() if m.key() is not None else None,
            "headers": {k: v.decode() for k, v in headers.items()},
            "attributes": attributes(structured),
            "data": structured.get_data(),
            "binary_attributes": attributes(binary),
        })
    c.close()
    return events


def from_lines():
    fmt = JSONFormat()
    events = []
    for line in sys.stdin:
        if line.strip():
            e = fmt.read(None, line.encode())
            events.append({"attributes": attributes(e), "data": e.get_data()})
    return events


if __name__ == "__main__":
    if sys.argv[1] == "kafka":
        evs = from_kafka(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        evs = from_lines()
    json.dump({"events": evs}, sys.stdout, default=str)
