"""Repair a recording cut off before it was closed (SIGKILL, a power cut, a full disk): copy every
record that can still be read into a new MCAP file with its summary, so that tools that need the
summary (ROS 2's ``ros2 bag``, rosbags, Foxglove's seek) open it. Schemas, channels and messages are
copied as they are (a ``ros2`` profile recording stays one); a damaged chunk is skipped and said, and
the copy ends where the file's framing breaks."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from goggles.errors import ConfigError, require
from goggles.logs.record import CHUNK_BYTES, chunk_records

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repaired:
    path: Path
    messages: int
    """Messages copied."""
    skipped_chunks: int
    """Damaged chunks that could not be read."""
    cut_off: bool
    """The original ended in a broken record (what a killed recorder leaves)."""


def repaired_name(path: Path) -> Path:
    """Where ``goggles recording repair`` writes by default: ``<stem>.repaired.mcap`` beside it."""
    return path.with_name(f"{path.stem}.repaired.mcap")


def repair_recording(path: Path, out: Path) -> Repaired:
    """Copy what can be read of the MCAP recording ``path`` into ``out`` (a new file, with a summary)."""
    require("mcap", "recording", "repairing recordings")
    from mcap.reader import make_reader
    from mcap.records import Attachment, Channel, Chunk, DataEnd, Header, Message, Metadata, Schema
    from mcap.stream_reader import StreamReader
    from mcap.writer import CompressionType, Writer

    path, out = Path(path), Path(out)
    if not path.is_file():
        raise ConfigError(f"{path}: no such recording")
    if out.exists() and out.resolve() == path.resolve():
        raise ConfigError(f"{out}: is the recording being repaired; write the repaired copy to another file")
    with open(path, "rb") as f:
        if f.read(8) != b"\x89MCAP0\r\n":
            raise ConfigError(
                f"{path}: not an MCAP recording (an lcm-logger log needs no repair: its events stand alone)"
            )
    schemas: dict[int, int] = {}  # the original's schema id -> the copy's
    channels: dict[int, int] = {}
    pending: dict[int, Channel] = {}  # channels whose schema has not come yet
    messages = skipped = 0
    cut_off = False
    with open(path, "rb") as source, open(out, "wb") as target:
        writer = Writer(target, chunk_size=CHUNK_BYTES, compression=CompressionType.LZ4)
        started = False
        reader = StreamReader(source, skip_magic=False, emit_chunks=True)

        def start(profile: str = "", library: str = "goggles recording repair") -> None:
            nonlocal started
            if not started:
                writer.start(profile=profile, library=library)
                started = True

        def add_channel(channel: Channel) -> None:
            schema = schemas.get(channel.schema_id, 0) if channel.schema_id else 0
            channels[channel.id] = writer.register_channel(
                channel.topic, channel.message_encoding, schema, dict(channel.metadata)
            )

        def take(record) -> None:
            nonlocal messages
            if isinstance(record, Header):
                start(record.profile, record.library or "goggles")
            elif isinstance(record, Schema) and record.id not in schemas:  # (a summary repeats them)
                start()
                schemas[record.id] = writer.register_schema(record.name, record.encoding, record.data)
                for channel_id, channel in list(pending.items()):
                    if channel.schema_id == record.id:
                        add_channel(pending.pop(channel_id))
            elif isinstance(record, Channel) and record.id not in channels and record.id not in pending:
                start()
                if record.schema_id and record.schema_id not in schemas:
                    pending[record.id] = record
                else:
                    add_channel(record)
            elif isinstance(record, Message) and record.channel_id in channels:
                writer.add_message(channels[record.channel_id], record.log_time, record.data, record.publish_time)
                messages += 1
            elif isinstance(record, Metadata) and not summary:
                start()
                writer.add_metadata(record.name, dict(record.metadata))
            elif isinstance(record, Attachment) and not summary:
                start()
                writer.add_attachment(record.create_time, record.log_time, record.name, record.media_type, record.data)

        summary = False  # past the data: records there repeat what came (or index it)
        try:  # a complete file's summary repeats every schema and channel: taken first, so messages
            # whose channels were declared in a damaged chunk are still copied
            with open(path, "rb") as f:
                found = make_reader(f).get_summary()
        except Exception:  # a killed recording has none
            found = None
        if found is not None:
            for schema in found.schemas.values():
                take(schema)
            for channel in found.channels.values():
                take(channel)
        try:
            for record in reader.records:
                if isinstance(record, DataEnd):
                    summary = True
                if not isinstance(record, Chunk):
                    take(record)
                    continue
                try:
                    inner = chunk_records(record)  # never inflated past what it declares, nor past 256 MiB
                except Exception as exc:  # CRC mismatch, a lying size, garbage inside
                    skipped += 1
                    log.warning("%s: a damaged chunk skipped (%s)", path, str(exc)[:120])
                    continue
                for item in inner:
                    take(item)
        except Exception:  # the framing breaks: where the recorder was killed
            cut_off = True
        start()
        writer.finish()
    if skipped:
        log.warning("%s: %d damaged chunk(s) could not be copied", path, skipped)
    return Repaired(out, messages, skipped, cut_off)
