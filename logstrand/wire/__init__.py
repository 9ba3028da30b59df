"""The wire protocol: message types and the framed CBOR codec.  Pure: no I/O."""

from ._codec import (
    FRAME_BYTES_MAX_DEFAULT,
    HEADER_BYTES,
    FrameDecoder,
    decode_body,
    encode_body,
    encode_frame,
)
from ._messages import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
    Append,
    AppendReply,
    ErrorReply,
    Hello,
    HelloAck,
    Ping,
    Pong,
    Records,
    Release,
    Store,
    StoreReply,
    choose_version,
)
from ._records import RecordBatch

__all__ = [
    "FRAME_BYTES_MAX_DEFAULT",
    "HEADER_BYTES",
    "MESSAGE_TYPES",
    "PROTOCOL_VERSION_MAX",
    "PROTOCOL_VERSION_MIN",
    "Append",
    "AppendReply",
    "ErrorReply",
    "FrameDecoder",
    "Hello",
    "HelloAck",
    "Ping",
    "Pong",
    "RecordBatch",
    "Records",
    "Release",
    "Store",
    "StoreReply",
    "choose_version",
    "decode_body",
    "encode_body",
    "encode_frame",
]
