"""The schema: generated code in sync with the .lcm files, decoding, input validation."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import pytest

import goggles_lcm
from goggles.transport.buses import split_frame
from goggles.transport.schema import MAX_INPUT_BYTES, MalformedMessage, decode_any, decode_input

REPO = Path(__file__).resolve().parents[1]


def test_generated_python_matches_the_lcm_files(tmp_path):
    lcm_gen = shutil.which("lcm-gen")
    if lcm_gen is None:
        pytest.skip("lcm-gen not on PATH (it ships with the lcm wheel)")
    sources = sorted((REPO / "goggles/transport/lcm").glob("*.lcm"))
    subprocess.run([lcm_gen, "--python", "--ppath", str(tmp_path), *map(str, sources)], check=True)
    generated = sorted(p.name for p in (tmp_path / "goggles_lcm").glob("*.py"))
    committed = sorted(p.name for p in (REPO / "goggles_lcm").glob("*.py"))
    assert generated == committed, "regenerate: lcm-gen --python --ppath . goggles/transport/lcm/*.lcm"
    for name in generated:
        assert filecmp.cmp(tmp_path / "goggles_lcm" / name, REPO / "goggles_lcm" / name, shallow=False), (
            f"goggles_lcm/{name} is out of date: lcm-gen --python --ppath . goggles/transport/lcm/*.lcm"
        )


def pose(position=(1.0, 2.0, 3.0), orientation=(1.0, 0.0, 0.0, 0.0)) -> bytes:
    message = goggles_lcm.pose_t()
    message.name = "body"
    message.position = list(position)
    message.orientation = list(orientation)
    message.valid = True
    return message.encode()


def test_decode_and_validate_inputs():
    assert list(decode_input(pose(), goggles_lcm.pose_t).position) == [1.0, 2.0, 3.0]
    assert isinstance(decode_any(pose()), goggles_lcm.pose_t)
    for bad, reason in [
        (pose(position=(0.0, float("nan"), 0.0)), "non-finite"),
        (pose(orientation=(0.0, 0.0, 0.0, 0.0)), "zero quaternion"),
        (pose(orientation=(float("inf"), 0.0, 0.0, 1.0)), "non-finite"),
        (pose()[:20], "cannot decode"),
        (b"\x00" * 7, "unknown message type"),
        (b"x" * (MAX_INPUT_BYTES + 1), "input limit"),
    ]:
        with pytest.raises(MalformedMessage, match=reason):
            decode_input(bad, goggles_lcm.pose_t)
    with pytest.raises(MalformedMessage, match="expected command_t"):
        decode_input(pose(), goggles_lcm.command_t)


def test_zeromq_frames():
    assert split_frame([b"quad0/imu\0\x01\x02"]) == ("quad0/imu", b"\x01\x02")
    assert split_frame([b"a\0b\0c"]) == ("a", b"b\0c")  # only the first NUL separates
    for frames in ([b"no separator"], [b"a\0", b"b"], [b"\xff\0data"]):
        with pytest.raises(ValueError):
            split_frame(frames)
