"""Recording and reading logs: MCAP (what rosbag2 and Foxglove use) and LCM event logs (lcm-logger).

Both keep the schema's encoded bytes as they went over the bus. MCAP files carry each LCM type's
``.lcm`` source as its schema (encoding ``lcm``) and the run file as metadata, so a recording says
what it is. The recorder never blocks the engine: messages go into a bounded queue that a writer
thread drains; when the queue is full a message is dropped and counted, never silently. MCAP is
written in chunks, so a recording killed mid-way is readable up to its last complete chunk.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from goggles.errors import ConfigError
from goggles.transport.schema import TYPES

log = logging.getLogger(__name__)

LCM_SOURCES = Path(__file__).resolve().parent / "transport" / "lcm"
#: MCAP chunk size: how much a killed recording can lose at most.
CHUNK_BYTES = 1 << 20


def log_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".mcap":
        return "mcap"
    if suffix in (".lcmlog", ".lcm", ".log"):
        return "lcm"
    raise ConfigError(f"{path}: record to a .mcap file (MCAP) or a .lcmlog file (LCM event log)")


class Recorder:
    """Writes (channel, bytes, time) to a log from a thread of its own.

    Args:
        path: ``.mcap`` or ``.lcmlog``.
        metadata: text stored in the MCAP file (e.g. the run file), ignored for LCM logs.
        queue_size: messages that may wait for the writer before new ones are dropped.
    """

    def __init__(self, path: str | Path, *, metadata: dict[str, str] | None = None, queue_size: int = 4096):
        self.path = Path(path)
        self.format = log_format(self.path)
        self.written = 0
        self.dropped = 0
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.format == "mcap":
            from mcap.writer import CompressionType, Writer

            self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
            self._writer = Writer(self._file, chunk_size=CHUNK_BYTES, compression=CompressionType.NONE)
            self._writer.start(profile="goggles", library="goggles")
            self._writer.add_metadata("goggles", metadata or {})
            self._schemas: dict[bytes, int] = {}
            self._channels: dict[str, int] = {}
        else:
            import lcm

            self._event_log = lcm.EventLog(str(self.path), "w", overwrite=True)
        self._thread = threading.Thread(target=self._drain, name="goggles-recorder", daemon=True)
        self._thread.start()

    def write(self, channel: str, data: bytes, log_time_ns: int) -> None:
        """Queue a message; never blocks (a full queue drops it and counts it)."""
        try:
            self._queue.put_nowait((channel, bytes(data), int(log_time_ns), time.time_ns()))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10_000 == 0:
                log.warning("recorder %s is behind: %d messages dropped so far", self.path, self.dropped)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._write(*item)
            self.written += 1

    def _write(self, channel: str, data: bytes, log_time: int, publish_time: int) -> None:
        if self.format == "lcm":
            self._event_log.write_event(log_time // 1000, channel, data)
            return
        channel_id = self._channels.get(channel)
        if channel_id is None:
            schema_id = self._schema(data[:8])
            channel_id = self._channels[channel] = self._writer.register_channel(channel, "lcm", schema_id)
        self._writer.add_message(channel_id, log_time, data, publish_time)

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

    def close(self) -> None:
        """Write what is queued and finish the file."""
        self._queue.put(None)
        self._thread.join()
        if self.format == "mcap":
            self._writer.finish()
            self._file.close()
        else:
            self._event_log.close()


def read_log(path: str | Path) -> Iterator[tuple[int, str, bytes]]:
    """(log time ns, channel, bytes) of every message in order of the file; a truncated MCAP file
    (a killed recording) yields what its complete chunks hold."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: log not found")
    if log_format(path) == "lcm":
        import lcm

        try:
            event_log = lcm.EventLog(str(path), "r")
        except Exception as exc:
            raise ConfigError(f"{path}: not an LCM event log: {exc}") from exc
        for event in event_log:
            if event.channel != "LCM_SELF_TEST":
                yield event.timestamp * 1000, event.channel, event.data
        return
    from mcap.records import Channel, Message
    from mcap.stream_reader import StreamReader

    channels: dict[int, str] = {}
    with open(path, "rb") as f:
        try:
            for record in StreamReader(f, skip_magic=False).records:
                if isinstance(record, Channel):
                    channels[record.id] = record.topic
                elif isinstance(record, Message):
                    yield record.log_time, channels[record.channel_id], record.data
        except Exception as exc:  # truncated or corrupt from here on: stop at the last good record
            if not channels:
                raise ConfigError(f"{path}: not a readable MCAP file: {exc}") from exc
            log.warning("%s: stopped reading at a damaged record (%s); the file was probably cut short", path, exc)


def read_metadata(path: str | Path) -> dict[str, str]:
    """The 'goggles' metadata of an MCAP recording (the run file), or {} (LCM logs have none)."""
    path = Path(path)
    if log_format(path) != "mcap":
        return {}
    from mcap.records import Metadata
    from mcap.stream_reader import StreamReader

    with open(path, "rb") as f:
        try:
            for record in StreamReader(f, skip_magic=False).records:
                if isinstance(record, Metadata) and record.name == "goggles":
                    return dict(record.metadata)
        except Exception:  # a truncated file: no metadata found before the damage
            return {}
    return {}
