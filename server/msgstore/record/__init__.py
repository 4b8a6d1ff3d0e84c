"""The record format of the commit log (byte-compatible with RocketMQ's), on its own so that
the engine, the server, the client and the pipeline can read and write records without
importing each other: ``codec`` (encode, decode, properties, CRC, message ids, hashes) and its
compiled hot loops ``_native`` (``codec._native``; None when not built)."""
