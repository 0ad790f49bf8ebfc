"""BVH (Biovision hierarchy) motion files: the common interchange format of human motion capture.

A BVH file has a joint hierarchy (offsets from the parent, channel lists) and frames of channel
values. Joints' rotations are Euler angles in degrees applied in the order their channels are
listed (intrinsic), positions are in the file's own units and up axis, declared by the caller as for
meshes (often centimetres, +Y up). End sites become leaf bones, so hands, feet and heads get volume.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from goggles.checks import FLOAT32_MAX
from goggles.errors import SceneError
from goggles.frames import quat_from_axis_angle, quat_to_matrix
from goggles.scene.assets import UNITS_M, UP_AXES
from goggles.scene.avatar import SkeletonPose

_AXES = {"X": (1.0, 0.0, 0.0), "Y": (0.0, 1.0, 0.0), "Z": (0.0, 0.0, 1.0)}


@dataclass
class BvhMotion:
    """A parsed BVH clip."""

    bones: list[str]
    parents: list[int]
    offsets: np.ndarray
    """(B, 3) joint offsets from the parent, file units."""
    channels: list[list[str]]
    """Per bone, e.g. ["Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation"]."""
    frames: np.ndarray
    """(frames, channels) values."""
    frame_time: float
    """s per frame."""
    source: str = "<bvh>"

    @property
    def duration(self) -> float:
        return len(self.frames) * self.frame_time

    def pose(self, t: float, *, units: str, up: str, T_WR: np.ndarray | None = None, loop: bool = True) -> SkeletonPose:
        """World bone poses at time t (s): the nearest earlier frame, looping or holding the last.

        Args:
            units, up: the file's length unit and up axis (keys of ``UNITS_M`` / ``UP_AXES``).
            T_WR: (4, 4) where the clip's origin goes in the world (after units and up axis).
        """
        if units not in UNITS_M or up not in UP_AXES:
            raise SceneError(f"{self.source}: units {units!r} / up {up!r} unknown")
        index = int(np.floor(t / self.frame_time))
        index = index % len(self.frames) if loop else min(max(index, 0), len(self.frames) - 1)
        values = self.frames[index]
        R_up = UP_AXES[up]
        scale = UNITS_M[units]
        T_WR = np.eye(4) if T_WR is None else T_WR
        world = np.zeros((len(self.bones), 4, 4))
        column = 0
        for j, (parent, names) in enumerate(zip(self.parents, self.channels)):
            local = np.eye(4)
            local[:3, 3] = self.offsets[j]
            R = np.eye(3)
            for name in names:
                value = values[column]
                column += 1
                if name.endswith("position"):
                    local[:3, 3] += np.array(_AXES[name[0]]) * value
                else:
                    R = R @ quat_to_matrix(quat_from_axis_angle(_AXES[name[0]], np.radians(value)))
            local[:3, :3] = R
            world[j] = local if parent < 0 else world[parent] @ local
        # File frame -> goggles: metres, +Z up (joint frames re-expressed too), then placed.
        convert = np.eye(4)
        convert[:3, :3] = R_up
        unconvert = np.eye(4)
        unconvert[:3, :3] = R_up.T
        world[:, :3, 3] *= scale
        world = T_WR @ convert @ world @ unconvert
        return SkeletonPose(tuple(self.bones), tuple(self.parents), world)


#: Frame times a clip may have, s: a capture at 1 MHz to one frame an hour (typical: 1/120 to 1/30).
MIN_FRAME_TIME, MAX_FRAME_TIME = 1e-6, 3600.0


def load_bvh(path: str | Path) -> BvhMotion:
    """Parse a BVH file.

    Raises:
        SceneError: naming the file, the line and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise SceneError(f"{path}: BVH file not found")
    tokens = path.read_text(errors="replace").split()
    return parse_bvh(tokens, str(path))


def parse_bvh(tokens: list[str], source: str = "<bvh>") -> BvhMotion:
    bones, parents, offsets, channels = [], [], [], []
    stack: list[int] = []
    i = 0

    def expect(word: str) -> None:
        nonlocal i
        if i >= len(tokens) or tokens[i] != word:
            found = tokens[i] if i < len(tokens) else "end of file"
            raise SceneError(f"{source}: expected {word!r}, found {found!r} (token {i})")
        i += 1

    try:
        expect("HIERARCHY")
        while i < len(tokens) and tokens[i] != "MOTION":
            word = tokens[i]
            if word in ("ROOT", "JOINT", "End"):
                name = tokens[i + 1] if word != "End" else f"{bones[stack[-1]]}_end"
                i += 2
                expect("{")
                expect("OFFSET")
                offset = [float(v) for v in tokens[i : i + 3]]
                i += 3
                names: list[str] = []
                if word != "End":
                    expect("CHANNELS")
                    count = int(tokens[i])
                    names = tokens[i + 1 : i + 1 + count]
                    i += 1 + count
                    if any(n[0] not in _AXES or n[1:] not in ("position", "rotation") for n in names):
                        raise SceneError(f"{source}: joint {name!r}: unknown channels {names}")
                parents.append(stack[-1] if stack else -1)
                bones.append(name)
                offsets.append(offset)
                channels.append(names)
                stack.append(len(bones) - 1)
            elif word == "}":
                stack.pop()
                i += 1
            else:
                raise SceneError(f"{source}: unexpected {word!r} in HIERARCHY (token {i})")
        expect("MOTION")
        expect("Frames:")
        count = int(tokens[i])
        i += 1
        expect("Frame")
        expect("Time:")
        frame_time = float(tokens[i])
        i += 1
        width = sum(len(c) for c in channels)
        values = np.array([float(v) for v in tokens[i:]], dtype=np.float64)
    except (ValueError, IndexError) as exc:
        raise SceneError(f"{source}: malformed BVH near token {i}: {exc}") from exc
    if not bones or width == 0 or count < 1 or values.size != count * width:
        raise SceneError(f"{source}: {values.size} motion values for {count} frames of {width} channels")
    if not MIN_FRAME_TIME <= frame_time <= MAX_FRAME_TIME:  # NaN fails too
        raise SceneError(
            f"{source}: 'Frame Time: {frame_time}' must be {MIN_FRAME_TIME:g} to {MAX_FRAME_TIME:g} s per frame"
        )
    if not (np.all(np.abs(values) <= FLOAT32_MAX) and np.all(np.abs(np.array(offsets)) <= FLOAT32_MAX)):
        raise SceneError(f"{source}: non-finite offsets or motion values (or beyond float32's range)")
    return BvhMotion(bones, parents, np.array(offsets), channels, values.reshape(count, width), frame_time, source)
