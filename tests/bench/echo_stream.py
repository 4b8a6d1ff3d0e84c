"""An empty gRPC streaming round trip: a server whose SendStream answers every request at once
with an empty SendResponse naming its request_id (no store behind it), on the same grpc.aio
server machinery as msgstore. What a single send over the stream can at best cost in Python.

``python tests/bench/echo_stream.py PORT``
"""

from __future__ import annotations

import asyncio
import sys

import grpc

from msgstore.v1 import msgstore_pb2 as pb


async def serve(port: int) -> None:
    server = grpc.aio.server()

    async def send_stream(requests, context):
        async for data in requests:
            await context.write(pb.SendResponse(request_id=pb.SendRequest.FromString(data).request_id).SerializeToString())

    handler = grpc.method_handlers_generic_handler(
        "msgstore.v1.MessageStore", {"SendStream": grpc.stream_stream_rpc_method_handler(send_stream)}
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
