"""Recording and reading logs: MCAP (what rosbag2 and Foxglove use) and LCM event logs (lcm-logger).

Both keep the schema's encoded bytes as they went over the bus. MCAP files carry each LCM type's
``.lcm`` source as its schema (encoding ``lcm``) and the run file as metadata, so a recording says
what it is. The recorder never blocks the engine: messages go into a bounded queue that a writer
thread drains; when the queue is full a message is dropped and counted, never silently. MCAP is
written in chunks, so a recording killed mid-way is readable up to its last complete chunk.
"""

from __future__ import annotations

import logging
import mmap
import queue
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from goggles.errors import ConfigError, require
from goggles.runtime.failures import RepeatedFailure
from goggles.transport.schema import TYPES

log = logging.getLogger(__name__)

LCM_SOURCES = Path(__file__).resolve().parents[1] / "transport" / "lcm"
#: MCAP chunk size: how much a killed recording can lose at most.
CHUNK_BYTES = 1 << 20
#: The largest message a recording holds and a chunk a reader decompresses: an 8192 x 8192 float32
#: image. A chunk declaring more is skipped before its bytes are inflated (a 4.4 MB chunk of lz4 that
#: inflates to 1 GiB cost 2 GB of memory), and the recorder does not write a larger message.
MAX_MESSAGE_BYTES = 256 << 20


def log_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".mcap":
        return "mcap"
    if suffix in (".lcmlog", ".lcm", ".log"):
        return "lcm"
    folder = " is a folder;" if path.is_dir() else ""
    bag = (
        " (a ROS 2 bag in SQLite: ros2 bag convert makes an MCAP one, ros2 bag record -s mcap records one)"
        if suffix == ".db3"
        else ""
    )
    raise ConfigError(f"{path}:{folder} a log is a .mcap file (MCAP) or a .lcmlog file (LCM event log){bag}")


def recorded_format(path: Path) -> str:
    """Which kind of log ``path`` holds, "mcap" or "lcm", by its first bytes whatever its name
    (lcm-logger names its logs ``lcmlog-<date>.<n>`` by default).

    Raises:
        ConfigError: not found, or neither (what its name says it should be, and is not).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: log not found" + (" (it is a folder)" if path.is_dir() else ""))
    held = _held_format(path)
    if held is not None:
        return held
    if log_format(path) == "lcm":  # (raises for a name that is neither)
        raise ConfigError(f"{path}: not an LCM event log (no lcm-logger sync word at the start)")
    raise ConfigError(f"{path}: not an MCAP recording (no MCAP magic at the start)")


def is_log_file(path: Path) -> bool:
    """A file a folder replay takes: named as a log (a damaged one is then told), or holding one."""
    if not path.is_file():
        return False
    return path.suffix.lower() in (".mcap", ".lcmlog") or _held_format(path) is not None


def _held_format(path: Path) -> str | None:
    """The kind of log the file's first bytes say it holds (MCAP's magic: "mcap"; lcm-logger's sync
    word: "lcm"), or None."""
    with open(path, "rb") as f:
        head = f.read(8)
    return "mcap" if head == MCAP_MAGIC else "lcm" if head[:4] == LCM_LOG_SYNC else None


class Recorder:
    """Writes (channel, bytes, time) to a log from a thread of its own.

    Args:
        path: ``.mcap`` or ``.lcmlog``.
        metadata: text stored in the MCAP file (e.g. the run file), ignored for LCM logs.
        queue_size: messages that may wait for the writer before new ones are dropped.
        compression: MCAP chunk compression, ``lz4`` (default), ``zstd`` or ``none``. Measured on the
            default run (320x240 stereo depth + colour): none 32 MB per sim second, lz4 0.42x of it at
            no measurable frame-rate cost, zstd 0.33x at 10-25 % fewer frames/s on two cores.
        on_error: called once, from the writer thread, with a one-line reason when writing fails
            (a full disk); recording stops there and what was written stays readable.
        ros2: a ``goggles.transport.ros2.topics.Ros2Topics``: write the ROS 2 topics instead (schema
            encoding ``ros2msg``, CDR payloads), which ``ros2 bag``, Foxglove and rosbags open. MCAP only.

    Raises:
        ConfigError: the path cannot be written (a directory, no permission, a read-only disk).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        metadata: dict[str, str] | None = None,
        queue_size: int = 4096,
        compression: str = "lz4",
        on_error=None,
        ros2=None,
    ):
        self.path = Path(path)
        self.format = log_format(self.path)
        if self.format == "mcap":
            require("mcap", "recording", "recording to MCAP")
        if ros2 is not None and self.format != "mcap":
            raise ConfigError(f"{self.path}: a ROS 2 recording is an MCAP file; record to FILE.mcap")
        self._ros2 = ros2
        self._unconvertible = RepeatedFailure(log, f"recording {self.path}: a message not written as ROS 2")
        self._too_large = RepeatedFailure(
            log, f"recording {self.path}: a message over {MAX_MESSAGE_BYTES >> 20} MiB not recorded"
        )
        self.written = 0
        self.dropped = 0
        self.error: str | None = None
        """Why recording stopped early, or None."""
        self._on_error = on_error
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        if self.path.is_dir():
            raise ConfigError(f"{self.path}: is a folder; record to a .mcap or .lcmlog file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.format == "mcap":
                from mcap.writer import CompressionType, Writer

                kinds = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
                if compression not in kinds:
                    raise ConfigError(f"recording compression {compression!r}: choose one of {sorted(kinds)}")
                self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
                self._writer = Writer(self._file, chunk_size=CHUNK_BYTES, compression=kinds[compression])
                self._writer.start(profile="goggles" if ros2 is None else "ros2", library="goggles")
                self._writer.add_metadata("goggles", metadata or {})
                self._schemas: dict[bytes, int] = {}
                self._channels: dict[str, int] = {}
            else:
                import lcm

                open(self.path, "ab").close()  # lcm.EventLog reports no reason of its own
                self._event_log = lcm.EventLog(str(self.path), "w", overwrite=True)
        except OSError as exc:
            raise ConfigError(f"cannot record to {self.path}: {exc.strerror or exc}") from exc
        self._thread = threading.Thread(target=self._drain, name="goggles-recorder", daemon=True)
        self._thread.start()

    def write(self, channel: str, data, log_time_ns: int) -> None:
        """Queue a message; never blocks (a full queue drops it and counts it). ``data`` (bytes-like) is
        queued as it is when it cannot change (bytes, or a read-only view: the engine's frames, which
        nothing writes once built), else copied: the caller's thread never copies an image for it."""
        if self.error is not None:
            self.dropped += 1
            return
        if len(memoryview(data).cast("B")) > MAX_MESSAGE_BYTES:
            self.dropped += 1
            self._too_large.happened(f"{channel}: {len(memoryview(data).cast('B')) / 2**20:.0f} MiB")
            return
        if not isinstance(data, bytes) and not memoryview(data).readonly:
            data = bytes(data)
        try:
            self._queue.put_nowait((channel, data, int(log_time_ns), time.time_ns()))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10_000 == 0:
                log.warning("recorder %s is behind: %d messages dropped so far", self.path, self.dropped)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self.error is not None:
                continue  # keep emptying the queue, so close() is never stuck behind it
            try:
                self._write(*item)
                self.written += 1
            except Exception as exc:  # OSError (disk full), or the writer's own error about it
                self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        self.error = f"recording to {self.path} stopped after {self.written} messages: {reason}"
        log.error("%s", self.error)
        if self._on_error is not None:
            self._on_error(self.error)

    def _write(self, channel: str, data, log_time: int, publish_time: int) -> None:
        if self.format == "lcm":
            self._event_log.write_event(log_time // 1000, channel, bytes(data))  # lcm takes bytes only
            return
        if self._ros2 is not None:
            self._write_ros2(data, log_time, publish_time)
            return
        channel_id = self._channels.get(channel)
        if channel_id is None:
            schema_id = self._schema(bytes(data[:8]))
            channel_id = self._channels[channel] = self._writer.register_channel(channel, "lcm", schema_id)
        self._writer.add_message(channel_id, log_time, data, publish_time)

    def _write_ros2(self, data: bytes, log_time: int, publish_time: int) -> None:
        from goggles.transport.ros2.definitions import message_definition
        from goggles.transport.schema import MalformedMessage, decode_any

        try:
            messages = self._ros2.convert(decode_any(data))
        except MalformedMessage:
            return
        except Exception as exc:  # a message ROS 2 cannot hold: dropped, and the recording goes on
            self._unconvertible.happened(exc)
            return
        if not self._channels:  # the first message: the sensor mounts go first
            messages = self._ros2.static_transforms() + messages
        for message in messages:
            if message.topic not in self._channels:
                if message.type_name not in self._schemas:
                    definition = message_definition(message.type_name, self._ros2.settings.distro)
                    self._schemas[message.type_name] = self._writer.register_schema(
                        message.type_name, "ros2msg", definition.encode()
                    )
                schema_id = self._schemas[message.type_name]
                self._channels[message.topic] = self._writer.register_channel(message.topic, "cdr", schema_id)
            self._writer.add_message(self._channels[message.topic], log_time, message.cdr, publish_time)

    def _schema(self, fingerprint: bytes) -> int:
        if fingerprint not in self._schemas:
            message_type = TYPES.get(fingerprint)
            if message_type is None:
                name, text = "unknown", b""
            else:
                name = f"goggles_lcm.{message_type.__name__}"
                text = (LCM_SOURCES / f"{message_type.__name__}.lcm").read_bytes()
            self._schemas[fingerprint] = self._writer.register_schema(name, "lcm", text)
        return self._schemas[fingerprint]

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued and finish the file; returns within about ``timeout`` seconds even
        when the disk stalls (the queue is then abandoned; what reached the file stays readable)."""
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:
                self._queue.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            log.error("recorder %s: the writer did not finish in %.0f s; closing what was written", self.path, timeout)
            self.error = self.error or f"recording to {self.path} did not finish writing in {timeout:.0f} s"
            return  # the daemon thread is abandoned; finishing the file under it would corrupt it
        try:
            if self.format == "mcap":
                if self.error is None:
                    self._writer.finish()
                self._file.close()
            else:
                self._event_log.close()
        except Exception as exc:  # the summary did not fit on the disk either
            if self.error is None:
                self._fail(exc)


MCAP_MAGIC = b"\x89MCAP0\r\n"
LCM_LOG_SYNC = b"\xed\xa1\xda\x01"


def read_log(path: str | Path) -> Iterator[tuple[int, str, bytes]]:
    """(log time ns, channel, bytes) of every message in order of the file.

    MCAP chunks are checked against their CRCs: a damaged chunk is named in a warning and skipped,
    and reading goes on with the next; a truncated file (a killed recording) yields what its complete
    chunks hold. An LCM event log's damaged events are skipped to the next sync word, likewise. A file
    is read as what its first bytes say it holds, whatever its name; one that holds neither is refused.

    Raises:
        ConfigError: not found, or not an MCAP file / LCM event log.
    """
    path = Path(path)
    if recorded_format(path) == "lcm":
        yield from _read_lcm_log(path)
        return
    require("mcap", "recording", "reading MCAP recordings")
    yield from _read_mcap(path)


#: An event's header (lcm-logger's format, big-endian): sync word, event number, time stamp (µs),
#: channel length and data length.
LCM_EVENT_HEADER = struct.Struct(">4sqqii")
#: lcm's own reader refuses longer channel names as damage.
LCM_MAX_CHANNEL_BYTES = 1000


def _read_lcm_log(path: Path) -> Iterator[tuple[int, str, bytes]]:
    """lcm-logger's events, read here rather than by ``lcm.EventLog``: that reader ends quietly at the
    first damaged event, losing the rest of the flight. An event is taken only when its header is
    sane and the next event's sync word (or the file's end) follows it; otherwise its bytes are
    skipped to the next sync word, and the skipped spans are named in one warning."""
    size = path.stat().st_size
    events = 0
    skipped: list[tuple[int, int]] = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        position = 0
        while position + LCM_EVENT_HEADER.size <= size:
            sync, _, utime, channel_bytes, data_bytes = LCM_EVENT_HEADER.unpack_from(data, position)
            channel_at = position + LCM_EVENT_HEADER.size
            end = channel_at + channel_bytes + data_bytes
            whole = (
                sync == LCM_LOG_SYNC
                and 0 < channel_bytes <= LCM_MAX_CHANNEL_BYTES
                and data_bytes >= 0
                and end <= size
                and (end == size or data[end : end + 4] == LCM_LOG_SYNC)
            )
            channel = _channel_name(data[channel_at : channel_at + channel_bytes]) if whole else None
            if channel is None:
                following = data.find(LCM_LOG_SYNC, position + 1)
                if following < 0:  # nothing readable after it: a cut-off (or damaged) end
                    break
                skipped.append((position, following))
                position = following
                continue
            events += 1
            if channel != "LCM_SELF_TEST":
                yield utime * 1000, channel, data[channel_at + channel_bytes : end]
            position = end
    if events == 0:
        raise ConfigError(f"{path}: not a readable LCM event log (no event could be read)")
    if skipped:
        spans = ", ".join(f"{a}-{b}" for a, b in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        log.warning(
            "%s: %d damaged span(s) of bytes skipped (%s); the events after them were read", path, len(skipped), spans
        )
    if position < size:
        log.warning(
            "%s: stopped reading at a damaged or cut-off event after event %d (%d bytes)", path, events, size - position
        )


def _channel_name(raw: bytes) -> str | None:
    """An event's channel, or None where its bytes are not one (damage)."""
    try:
        channel = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return channel if channel.isprintable() else None


def _summary_channels(path: Path) -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    """Channel ids -> topics, message encodings and schema (message type) names, from the file's summary
    section (it repeats them all), or empty if it has none."""
    from mcap.reader import make_reader

    try:
        with open(path, "rb") as f:
            summary = make_reader(f).get_summary()
    except Exception:  # a killed recording has no summary: the chunks name the channels
        return {}, {}, {}
    if summary is None:
        return {}, {}, {}
    names = {i: schema.name for i, schema in summary.schemas.items()}
    return (
        {i: c.topic for i, c in summary.channels.items()},
        {i: c.message_encoding for i, c in summary.channels.items()},
        {i: names.get(c.schema_id, "") for i, c in summary.channels.items()},
    )


def _own_poses(topic: str, encoding: str, type_name: str) -> str | None:
    """The body a ROS 2 channel gives poses of its own to (its odometry, its PoseStamped), else None."""
    if encoding != "cdr":
        return None
    from goggles.transport.ros2.readback import body_with_own_poses

    return body_with_own_poses(topic, type_name)


def _from_ros2(message, topic: str, type_name: str, with_own_poses: set[str]) -> Iterator[tuple[int, str, bytes]]:
    """A recorded ROS 2 message as what a replay reads (states and poses); the rest is skipped."""
    from goggles.transport.ros2.readback import goggles_messages

    try:
        converted = goggles_messages(topic, type_name, message.data, with_own_poses)
    except Exception as exc:  # a damaged payload: named, and the rest goes on
        log.warning("%s at %.3f s: not a readable ROS 2 message (%s); skipped", topic, message.log_time * 1e-9, exc)
        return
    for channel, data in converted:
        yield message.log_time, channel, data


def chunk_records(chunk) -> list:
    """The records of an MCAP chunk, inflated to at most the size it declares (a chunk that lies about
    its size, a compression bomb, is refused before it inflates further).

    Raises:
        ValueError: it declares over ``MAX_MESSAGE_BYTES``, inflates past what it declares, or its CRC or
            contents are damaged.
    """
    from mcap.records import Chunk
    from mcap.stream_reader import breakup_chunk

    size = chunk.uncompressed_size
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"it declares {size / 2**30:.1f} GiB, over the {MAX_MESSAGE_BYTES >> 20} MiB a chunk may hold")
    if chunk.compression == "lz4":
        import lz4.frame

        inflater = lz4.frame.LZ4FrameDecompressor()
        data = inflater.decompress(chunk.data, max_length=size)
        if not inflater.eof:
            raise ValueError(f"it inflates past the {size} bytes it declares")
    elif chunk.compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(chunk.data)
        data = reader.read(size)
        if reader.read(1):
            raise ValueError(f"it inflates past the {size} bytes it declares")
    elif chunk.compression == "":
        data = chunk.data
    else:
        raise ValueError(f"unknown compression {chunk.compression!r}")
    plain = Chunk(
        compression="",
        data=data,
        message_start_time=chunk.message_start_time,
        message_end_time=chunk.message_end_time,
        uncompressed_crc=chunk.uncompressed_crc,
        uncompressed_size=len(data),
    )
    return breakup_chunk(plain, validate_crc=True)


def _read_mcap(path: Path) -> Iterator[tuple[int, str, bytes]]:
    from mcap.records import Channel, Chunk, Message, Schema
    from mcap.stream_reader import StreamReader

    channels, encodings, types = _summary_channels(path)
    schemas: dict[int, str] = {}
    with_own_poses = {_own_poses(channels[i], encodings[i], types[i]) for i in channels} - {None}
    damaged = orphans = 0
    with open(path, "rb") as f:
        reader = StreamReader(f, skip_magic=False, emit_chunks=True)
        index = 0
        try:
            for record in reader.records:
                records = [record]
                if isinstance(record, Chunk):
                    index += 1
                    if record.uncompressed_size > MAX_MESSAGE_BYTES:  # decided before anything is inflated
                        damaged += 1
                        log.warning(
                            "%s: chunk %d declares %.1f GiB, over the %d MiB a chunk may hold; skipped",
                            path,
                            index,
                            record.uncompressed_size / 2**30,
                            MAX_MESSAGE_BYTES >> 20,
                        )
                        continue
                    try:
                        records = chunk_records(record)
                    except Exception as exc:  # CRC mismatch, a lying size, or garbage inside the chunk
                        damaged += 1
                        log.warning(
                            "%s: chunk %d (messages %.3f-%.3f s) is damaged (%s); skipped",
                            path,
                            index,
                            record.message_start_time * 1e-9,
                            record.message_end_time * 1e-9,
                            str(exc)[:120],
                        )
                        continue
                for item in records:
                    if isinstance(item, Schema):
                        schemas[item.id] = item.name
                    elif isinstance(item, Channel):
                        channels[item.id] = item.topic
                        encodings[item.id] = item.message_encoding
                        types[item.id] = schemas.get(item.schema_id, types.get(item.id, ""))
                        with_own_poses |= {_own_poses(item.topic, item.message_encoding, types[item.id])} - {None}
                    elif isinstance(item, Message):
                        if encodings.get(item.channel_id) == "cdr":  # a ROS 2 recording
                            topic, type_name = channels[item.channel_id], types[item.channel_id]
                            yield from _from_ros2(item, topic, type_name, with_own_poses)
                        elif item.channel_id in channels:
                            yield item.log_time, channels[item.channel_id], item.data
                        else:
                            orphans += 1  # its channel was declared in a damaged chunk
        except Exception as exc:  # the record framing itself is broken: nothing after it can be found
            log.warning(
                "%s: stopped reading at a damaged or cut-off record after chunk %d (%s)",
                path,
                index,
                (str(exc) or type(exc).__name__)[:120],
            )
    if damaged or orphans:
        log.warning(
            "%s: %d damaged chunk(s) skipped, %d message(s) of unknown channels dropped", path, damaged, orphans
        )


def read_metadata(path: str | Path) -> dict[str, str]:
    """The 'goggles' metadata of an MCAP recording (the run file), or {} (LCM logs have none)."""
    path = Path(path)
    if recorded_format(path) != "mcap":
        return {}
    from mcap.records import Metadata
    from mcap.stream_reader import StreamReader

    with open(path, "rb") as f:
        try:
            for record in StreamReader(f, skip_magic=False, emit_chunks=True).records:
                if isinstance(record, Metadata) and record.name == "goggles":
                    return dict(record.metadata)
        except Exception:  # a truncated file: no metadata found before the damage
            return {}
    return {}
