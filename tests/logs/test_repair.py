"""goggles recording repair against damaged files: one flipped byte in the chunk that declared the
channels loses only that chunk's messages; a chunk that lies about its size is skipped before it inflates
(a crafted 1 MB chunk could ask for gigabytes)."""

from __future__ import annotations

import tracemalloc

import pytest

from goggles.logs.repair import repair_recording

mcap_writer = pytest.importorskip("mcap.writer")


def _recording(path, messages: int = 375) -> None:
    """An MCAP of ``messages`` on one channel in small lz4 chunks: its schema and channel in the first."""
    with path.open("wb") as f:
        writer = mcap_writer.Writer(f, chunk_size=2048, compression=mcap_writer.CompressionType.LZ4)
        writer.start(profile="goggles", library="test")
        schema = writer.register_schema("vehicle_state_t", "lcm", b"")
        channel = writer.register_channel("quad0/state", "lcm", schema)
        for k in range(messages):
            writer.add_message(channel, k * 1000, bytes([k % 251]) * 64, k * 1000)
        writer.finish()


def _chunks(path):
    from mcap.reader import make_reader

    with path.open("rb") as f:
        return sorted(make_reader(f).get_summary().chunk_indexes, key=lambda c: c.chunk_start_offset)


def test_a_flipped_byte_in_the_chunk_that_declared_the_channels_loses_that_chunk_alone(tmp_path):
    path = tmp_path / "flipped.mcap"
    _recording(path)
    chunks = _chunks(path)
    assert len(chunks) >= 4
    data = bytearray(path.read_bytes())
    first = chunks[0]
    data[first.chunk_start_offset + first.chunk_length - 10] ^= 0xFF  # inside its compressed records
    path.write_bytes(bytes(data))
    result = repair_recording(path, tmp_path / "out.mcap")
    assert result.skipped_chunks == 1
    assert 0 < result.messages < 375 and result.messages >= 375 - 375 // len(chunks) - 40


def test_a_chunk_that_inflates_past_what_it_declares_is_skipped_before_it_does(tmp_path):
    import lz4.frame
    from mcap.data_stream import RecordBuilder
    from mcap.records import Chunk
    from mcap.stream_reader import StreamReader

    good = tmp_path / "good.mcap"
    _recording(good, 40)
    compressor = lz4.frame.LZ4FrameCompressor()
    zeros = b"\0" * (1 << 20)
    bomb = compressor.begin() + b"".join(compressor.compress(zeros) for _ in range(256)) + compressor.flush()
    builder = RecordBuilder()
    with good.open("rb") as f:
        builder.write(f.read(8))  # the magic
        f.seek(0)
        for k, record in enumerate(StreamReader(f, skip_magic=False, emit_chunks=True).records):
            if isinstance(record, Chunk) and k == 1:  # a chunk of 256 MiB of zeros that says it holds 1 KiB
                Chunk(
                    compression="lz4", data=bomb, message_start_time=0, message_end_time=0,
                    uncompressed_crc=0, uncompressed_size=1024,
                ).write(builder)  # fmt: skip
            record.write(builder)
        builder.write(b"\x89MCAP0\r\n")
    bombed = tmp_path / "bombed.mcap"
    bombed.write_bytes(builder.end())
    tracemalloc.start()
    try:
        result = repair_recording(bombed, tmp_path / "out.mcap")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.skipped_chunks == 1 and result.messages == 40
    assert peak < 64 << 20  # the bomb was not inflated (it would take 256 MiB)
