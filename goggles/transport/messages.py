"""The engine's output messages as pure functions of what they carry, and their channel names.

Channels (the same names on LCM and ZeroMQ): ``clock``, ``<vehicle>/state``, ``<vehicle>/imu``,
``<vehicle>/collision``, ``<vehicle>/<camera>/<output>`` (depth, range, rgb, segmentation),
``<vehicle>/<camera>/beacons``, ``<vehicle>/<camera>/events``, ``<vehicle>/<sensor>/ranges``.
"""

from __future__ import annotations

import numpy as np

import goggles_lcm
from goggles.frames import matrix_to_quat
from goggles.transport.schema import EDIT_ACTIONS, EVENT_DTYPE, Encoding, header

#: ``image_t.encoding`` of each image output.
ENCODINGS = {
    "depth": Encoding.DEPTH_F32,
    "range": Encoding.RANGE_F32,
    "rgb": Encoding.RGB8,
    "segmentation": Encoding.SEGMENTATION_I32,
}


def image_channel(camera: str, output: str) -> str:
    """``camera`` is ``<vehicle>/<camera>``."""
    return f"{camera}/{output}"


def image_message(
    utime: int, seq: int, *, camera: str, output: str, model, T_WC: np.ndarray, pose_utime: int, pixels: np.ndarray
) -> tuple[goggles_lcm.image_t, memoryview]:
    """One image of ``camera`` rendered from ``T_WC`` (optical frame in the world) at ``utime``, as
    the image_t without its pixels (``data`` empty, ``data_size`` set) and the pixels' bytes: the
    message's encoding is ``image.encode()`` followed by those bytes (``data`` is image_t's last
    field), so whoever frames it copies the pixels once (``goggles.transport.buses.framed``)."""
    payload = memoryview(np.ascontiguousarray(pixels)).cast("B")
    image = goggles_lcm.image_t()
    image.header = header(utime, seq)
    image.pose_utime = pose_utime
    image.camera = camera
    image.width, image.height = model.width, model.height
    image.encoding = int(ENCODINGS[output])
    image.fx, image.fy, image.cx, image.cy = model.fx, model.fy, model.cx, model.cy
    image.lens = model.lens
    image.distortion = [*model.distortion, *(0.0,) * (5 - len(model.distortion))]
    image.position = T_WC[:3, 3].tolist()
    image.orientation = matrix_to_quat(T_WC[:3, :3]).tolist()
    image.data = b""
    image.data_size = len(payload)
    return image, payload


def events_message(
    utime: int, seq: int, camera: str, model, events: np.ndarray, *, end_utime: int
) -> tuple[goggles_lcm.events_t, memoryview]:
    """An event camera's events of the window [utime, end_utime) (``goggles.sensors.events.EVENTS``,
    absolute times in ns), as the events_t without its records and the records' bytes (framed as
    ``image_message``'s pixels are)."""
    records = np.zeros(len(events), EVENT_DTYPE)
    records["x"], records["y"], records["polarity"] = events["x"], events["y"], events["polarity"]
    records["t"] = events["t"] - int(utime) * 1000
    packet = goggles_lcm.events_t()
    packet.header = header(utime, seq)
    packet.end_utime = int(end_utime)
    packet.camera = camera
    packet.width, packet.height = model.width, model.height
    packet.num_events = len(records)
    packet.data = b""
    packet.data_size = records.nbytes
    return packet, memoryview(records.view(np.uint8))


def beacons_message(utime: int, seq: int, camera: str, detections) -> goggles_lcm.beacons_t:
    message = goggles_lcm.beacons_t()
    message.header = header(utime, seq)
    message.camera = camera
    message.num_beacons = len(detections)
    message.ids = [d.id for d in detections]
    message.u = [d.u for d in detections]
    message.v = [d.v for d in detections]
    message.range = [d.range for d in detections]
    return message


def pose_message(utime: int, seq: int, name: str, position, orientation, valid: bool = True) -> goggles_lcm.pose_t:
    """A body's pose (``pose/<name>``): world position, m, and orientation (w, x, y, z)."""
    message = goggles_lcm.pose_t()
    message.header = header(utime, seq)
    message.name = name
    message.position, message.orientation = [float(v) for v in position], [float(v) for v in orientation]
    message.valid = bool(valid)
    return message


def edit_result_message(utime: int, seq: int, edit, why: str | None) -> goggles_lcm.edit_result_t:
    """The answer to scene edit ``edit`` (a ``scene_edit_t``): applied where ``why`` is None."""
    message = goggles_lcm.edit_result_t()
    message.header = header(utime, seq)
    message.action, message.actor = edit.action, edit.actor
    message.applied, message.reason = why is None, why or ""
    return message


def ranges_message(utime: int, seq: int, sensor: str, model, readings: np.ndarray) -> goggles_lcm.ranges_t:
    message = goggles_lcm.ranges_t()
    message.header = header(utime, seq)
    message.sensor = sensor
    message.min_range, message.max_range = model.min_range, model.max_range
    message.num_ranges = len(readings)
    message.ranges = readings.tolist()
    return message


def lidar_message(utime: int, seq: int, sensor: str, model, scan) -> goggles_lcm.lidar_t:
    """A scan's valid points (sensor frame, each where the sensor was when it fired)."""
    valid = np.isfinite(scan.range)
    points = scan.directions[valid] * scan.range[valid][:, None]
    message = goggles_lcm.lidar_t()
    message.header = header(utime, seq)
    message.sensor = sensor
    message.min_range, message.max_range = model.min_range, model.max_range
    message.num_points = int(valid.sum())
    message.x, message.y, message.z = (points[:, i].astype(np.float32).tolist() for i in range(3))
    message.intensity = scan.intensity[valid].astype(np.float32).tolist()
    message.time = np.broadcast_to(scan.time[:, None], scan.range.shape)[valid].astype(np.float32).tolist()
    message.ring = scan.ring[valid].astype(np.int16).tolist()
    return message


def collision_message(utime: int, seq: int, vehicle: str, other: str, contact) -> goggles_lcm.collision_t:
    """``vehicle`` touched ``other``: "world" (the scene, an actor) or another vehicle's name."""
    message = goggles_lcm.collision_t()
    message.header = header(utime, seq)
    message.vehicle = vehicle
    message.other = other
    message.point = contact.point.tolist()
    message.normal = contact.normal.tolist()
    message.depth = contact.depth
    return message


def imu_message(utime: int, seq: int, vehicle: str, accel: np.ndarray, gyro: np.ndarray) -> goggles_lcm.imu_t:
    """One IMU sample: specific force (m/s^2) and rates (rad/s) in the IMU frame."""
    message = goggles_lcm.imu_t()
    message.header = header(utime, seq)
    message.vehicle = vehicle
    message.linear_acceleration = np.asarray(accel, dtype=float).tolist()
    message.angular_velocity = np.asarray(gyro, dtype=float).tolist()
    return message


def state_message(utime: int, seq: int, vehicle: str, states, row: int = 0) -> goggles_lcm.vehicle_state_t:
    message = goggles_lcm.vehicle_state_t()
    message.header = header(utime, seq)
    message.vehicle = vehicle
    message.position = states.position[row].tolist()
    message.velocity = states.velocity[row].tolist()
    message.orientation = states.attitude[row].tolist()
    message.angular_velocity = states.rates[row].tolist()
    message.num_rotors = states.rotor_speed.shape[1]
    message.rotor_speeds = states.rotor_speed[row].tolist()
    message.crashed = bool(states.crashed[row])
    return message


def fc_status_message(utime: int, seq: int, vehicle: str, report) -> goggles_lcm.fc_status_t:
    """A firmware's status (``goggles.firmware.link.FirmwareReport``)."""
    message = goggles_lcm.fc_status_t()
    message.header = header(utime, seq)
    message.vehicle = vehicle
    message.armed = bool(report.armed)
    message.failsafe = bool(report.failsafe)
    message.stopped = bool(report.stopped)
    message.receiver_silent = bool(report.receiver_silent)
    message.num_flags = len(report.flags)
    message.flags = list(report.flags)
    return message


def vehicle_status_message(utime: int, seq: int, vehicle: str, status) -> goggles_lcm.vehicle_status_t:
    """What goggles says of a vehicle (``goggles.rig.vehicles.VehicleStatus``)."""
    message = goggles_lcm.vehicle_status_t()
    message.header = header(utime, seq)
    message.vehicle = vehicle
    message.holding = bool(status.holding)
    message.command_at = -1.0 if status.command_at is None else float(status.command_at)
    message.crashed = bool(status.crashed)
    message.problem = status.problem
    return message


def wind_message(utime: int, seq: int, vehicle: str, velocity) -> goggles_lcm.wind_t:
    """The air's velocity where a vehicle is (world ENU, m/s)."""
    message = goggles_lcm.wind_t()
    message.header = header(utime, seq)
    message.vehicle = vehicle
    message.velocity = [float(v) for v in velocity]
    return message


def clock_message(utime: int, seq: int, mode: int, scale: float, rates: dict[str, float]) -> goggles_lcm.clock_t:
    message = goggles_lcm.clock_t()
    message.header = header(utime, seq)
    message.mode = int(mode)
    message.scale = float(scale)
    message.num_rates = len(rates)
    message.rate_names = list(rates)
    message.rates = list(rates.values())
    return message


def step_reply(request_id: int, steps: int, step: int, dt: float) -> bytes:
    """The lockstep reply: sent once the outputs of the requested steps are published."""
    reply = goggles_lcm.step_t()
    reply.header = header(int(round(step * dt * 1e6)), step)
    reply.request_id = request_id
    reply.steps = steps
    return reply.encode()


def scene_edit_message(
    utime: int, seq: int, action: str, actor: str, prop: str, position, orientation
) -> goggles_lcm.scene_edit_t:
    """Spawn (an actor of ``prop``), move or remove an actor at a world pose (orientation w, x, y, z)."""
    message = goggles_lcm.scene_edit_t()
    message.header = header(utime, seq)
    message.action = EDIT_ACTIONS[action]
    message.actor, message.asset = actor, prop
    message.position = [float(v) for v in position]
    message.orientation = [float(v) for v in orientation]
    return message
