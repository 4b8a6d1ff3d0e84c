"""RocketMQ 5's official Python producer over TLS, in a process of its own: gRPC reads the CA
it verifies with from GRPC_DEFAULT_SSL_ROOTS_FILE_PATH when it starts (the client takes no CA
of its own), so the caller sets that variable. Prints one JSON line: what each send did.

    python -m tests.support.official_tls_producer ADDRESS ACCESS_KEY SECRET_KEY TOPIC [TOPIC...]
"""

from __future__ import annotations

import json
import sys

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main(address: str, access_key: str, secret_key: str, *topics: str) -> None:
    producer = Producer(ClientConfiguration(address, Credentials(access_key, secret_key), request_timeout=10), topics, tls_enable=True)
    producer.startup()
    out = {}
    try:
        for topic in topics:
            m = Message()
            m.topic = topic
            m.body = b"from the official client over TLS"
            try:
                out[topic] = {"ok": True, "id": producer.send(m).message_id}
            except Exception as e:  # the refusal, as the client raises it
                out[topic] = {"ok": False, "error": str(e)}
    finally:
        producer.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
