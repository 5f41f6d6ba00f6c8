"""The XPlane protobuf schema, built at import time from field numbers.

XPlane is the trace format written by the TensorFlow, JAX and PyTorch/XLA
profilers (``plugins/profile/<run>/<host>.xplane.pb``). Its field numbers are
facts of the format, taken from the public ``xplane.proto`` of
openxla/xla (``xla/tsl/profiler/protobuf/xplane.proto``), package
``tensorflow.profiler``. Building the descriptor here means no generated
``_pb2`` file, no protoc, and no TensorFlow or JAX import.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "scaldiag.xplane"

# (message, [(field name, number, type, label, message type or None, oneof index)])
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STR, _BYT, _MSG = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE

_MESSAGES = {
    "XSpace": [
        ("planes", 1, _MSG, _REP, "XPlane", None),
        ("errors", 2, _STR, _REP, None, None),
        ("warnings", 3, _STR, _REP, None, None),
        ("hostnames", 4, _STR, _REP, None, None),
    ],
    "XPlane": [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("lines", 3, _MSG, _REP, "XLine", None),
        ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REP, "XStat", None),
    ],
    "XLine": [
        ("id", 1, _I64, _OPT, None, None),
        ("display_id", 10, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 11, _STR, _OPT, None, None),
        ("timestamp_ns", 3, _I64, _OPT, None, None),
        ("duration_ps", 9, _I64, _OPT, None, None),
        ("events", 4, _MSG, _REP, "XEvent", None),
    ],
    "XEvent": [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("offset_ps", 2, _I64, _OPT, None, 0),
        ("num_occurrences", 5, _I64, _OPT, None, 0),
        ("duration_ps", 3, _I64, _OPT, None, None),
        ("stats", 4, _MSG, _REP, "XStat", None),
    ],
    "XStat": [
        ("metadata_id", 1, _I64, _OPT, None, None),
        ("double_value", 2, _DBL, _OPT, None, 0),
        ("uint64_value", 3, _U64, _OPT, None, 0),
        ("int64_value", 4, _I64, _OPT, None, 0),
        ("str_value", 5, _STR, _OPT, None, 0),
        ("bytes_value", 6, _BYT, _OPT, None, 0),
        ("ref_value", 7, _U64, _OPT, None, 0),
    ],
    "XEventMetadata": [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("display_name", 4, _STR, _OPT, None, None),
        ("metadata", 3, _BYT, _OPT, None, None),
        ("stats", 5, _MSG, _REP, "XStat", None),
        ("child_id", 6, _I64, _REP, None, None),
    ],
    "XStatMetadata": [
        ("id", 1, _I64, _OPT, None, None),
        ("name", 2, _STR, _OPT, None, None),
        ("description", 3, _STR, _OPT, None, None),
    ],
}
_ONEOFS = {"XEvent": "data", "XStat": "value"}
# map<int64, V> fields are repeated nested *Entry messages with map_entry set.
_MAP_ENTRIES = {
    "XPlane": [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]
}


def _add_field(msg, name, number, ftype, label, type_name, oneof):
    field = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="scaldiag/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    for msg_name, fields in _MESSAGES.items():
        msg = fdp.message_type.add(name=msg_name)
        if msg_name in _ONEOFS:
            msg.oneof_decl.add(name=_ONEOFS[msg_name])
        for field in fields:
            _add_field(msg, *field)
        for entry_name, value_type in _MAP_ENTRIES.get(msg_name, []):
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_field(entry, "key", 1, _I64, _OPT, None, None)
            _add_field(entry, "value", 2, _MSG, _OPT, value_type, None)
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
XSpace, XPlane, XLine = (
    GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
    for name in ("XSpace", "XPlane", "XLine")
)


def _number(message: str, field: str) -> int:
    return next(f[1] for f in _MESSAGES[message] if f[0] == field)


# The field numbers the vectorised decoder reads by hand (wire.py, read.py), named once, from the
# table above.
EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS, EVENT_STATS = (
    _number("XEvent", f) for f in ("metadata_id", "offset_ps", "duration_ps", "stats")
)
STAT_METADATA_ID, STAT_DOUBLE, STAT_UINT64, STAT_INT64, STAT_STR, STAT_BYTES, STAT_REF = (
    _number("XStat", f)
    for f in (
        "metadata_id",
        "double_value",
        "uint64_value",
        "int64_value",
        "str_value",
        "bytes_value",
        "ref_value",
    )
)
WIRE_VARINT, WIRE_FIXED64, WIRE_LENGTH = 0, 1, 2  # protobuf wire types


def tag(number: int, wire: int) -> int:
    """The one-byte tag of field ``number`` (< 16) with wire type ``wire``."""
    return number << 3 | wire


# One-byte tags of the repeated fields that hold the bulk of a trace.
PLANES_TAG = 1 << 3 | 2  # XSpace.planes
LINES_TAG = 3 << 3 | 2  # XPlane.lines
EVENTS_TAG = 4 << 3 | 2  # XLine.events
