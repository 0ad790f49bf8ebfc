"""Where the engine's messages go: built by ``goggles.transport.messages``, encoded once, published on
every bus and written to every sink (recordings, Foxglove), numbered per channel."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from goggles.engine.status import Counters, StageTimes
from goggles.rig.runfile import IMAGE_OUTPUTS
from goggles.transport import messages
from goggles.transport.buses import framed


class Outputs:
    def __init__(self, buses, sinks, counters: Counters, times: StageTimes, log_ns: Callable[[], int]):
        self.buses, self.sinks, self.counters, self.times, self.log_ns = buses, sinks, counters, times, log_ns
        self._seq: dict[str, int] = {}

    def publish(self, channel: str, message, payload=None, log_ns: int | None = None) -> None:
        """Encode ``message`` once, into one frame that every bus and sink reads (``payload``: the
        bytes of a trailing array that ``message`` declares but leaves empty, as an image's pixels;
        ``log_ns``: its log time, when not now: an IMU sample of a batch)."""
        t = time.perf_counter()
        frame_buffer, data = framed(channel, message.encode(), payload)
        for bus in self.buses:
            bus.publish(channel, data, frame_buffer)
        when = self.log_ns() if log_ns is None else log_ns
        for sink in self.sinks:
            sink.write(channel, data, when)
        self.counters.published += 1
        self.times.add("publish", time.perf_counter() - t)

    def seq(self, channel: str) -> int:
        """The next sequence number of ``channel`` (0, 1, 2...)."""
        seq = self._seq.get(channel, 0)
        self._seq[channel] = seq + 1
        return seq

    def camera_frame(self, cameras, T_WC: np.ndarray, images: dict, detections, utime: int, pose_utimes) -> None:
        """Every output of every camera of one rendered group: beacons first, then the images."""
        for i, camera in enumerate(cameras):
            name = camera.channel_prefix
            if "beacons" in camera.config.outputs:
                channel = f"{name}/beacons"
                found = [d for d in detections if d.camera == i]
                self.publish(channel, messages.beacons_message(utime, self.seq(channel), name, found))
            for output in (o for o in camera.config.outputs if o in IMAGE_OUTPUTS):
                channel = messages.image_channel(name, output)
                image, pixels = messages.image_message(
                    utime,
                    self.seq(channel),
                    camera=name,
                    output=output,
                    model=camera.model,
                    T_WC=T_WC[i],
                    pose_utime=pose_utimes[i],
                    pixels=images[output][i],
                )
                self.publish(channel, image, pixels)

    def events(self, cameras, events, start_utime: int, end_utime: int) -> None:
        """Each event camera's events of the window [start, end) (sim time, µs), one packet each."""
        for camera, fired in zip(cameras, events):
            name = camera.channel_prefix
            channel = f"{name}/events"
            packet, data = messages.events_message(
                start_utime, self.seq(channel), name, camera.model, fired, end_utime=end_utime
            )
            self.publish(channel, packet, data)

    def ranges(self, sensor: str, model, readings: np.ndarray, utime: int) -> None:
        channel = f"{sensor}/ranges"
        self.publish(channel, messages.ranges_message(utime, self.seq(channel), sensor, model, readings))

    def lidar(self, sensor: str, model, scan, utime: int) -> None:
        channel = f"{sensor}/lidar"
        self.publish(channel, messages.lidar_message(utime, self.seq(channel), sensor, model, scan))

    def collision(self, vehicle: str, other: str, contact, utime: int) -> None:
        """A collision, logged at the instant of contact (the physics tells it a few steps later)."""
        channel = f"{vehicle}/collision"
        message = messages.collision_message(utime, self.seq(channel), vehicle, other, contact)
        self.publish(channel, message, log_ns=utime * 1000)

    def imu(self, vehicle: str, accel: np.ndarray, gyro: np.ndarray, utime: int) -> None:
        """One IMU sample, logged at its own instant (a batch is delivered after its last sample)."""
        channel = f"{vehicle}/imu"
        message = messages.imu_message(utime, self.seq(channel), vehicle, accel, gyro)
        self.publish(channel, message, log_ns=utime * 1000)

    def copy(self, channel: str, data: bytes, log_ns: int) -> None:
        """A recorded message written to the sinks as it was (a replay carries the inputs and truth
        it was rendered from into its recording), not to the buses."""
        for sink in self.sinks:
            sink.write(channel, data, log_ns)

    def state(self, vehicle: str, states, utime: int, row: int = 0) -> None:
        channel = f"{vehicle}/state"
        self.publish(channel, messages.state_message(utime, self.seq(channel), vehicle, states, row))

    def fc_status(self, vehicle: str, report, utime: int) -> None:
        """What a vehicle's firmware says of itself (``<vehicle>/fc``)."""
        channel = f"{vehicle}/fc"
        self.publish(channel, messages.fc_status_message(utime, self.seq(channel), vehicle, report))

    def vehicle_status(self, vehicle: str, status, utime: int) -> None:
        """What goggles says of a vehicle: holding, crashed, its firmware's trouble (``<vehicle>/status``)."""
        channel = f"{vehicle}/status"
        self.publish(channel, messages.vehicle_status_message(utime, self.seq(channel), vehicle, status))

    def wind(self, vehicle: str, velocity, utime: int) -> None:
        """The air where a vehicle is (``<vehicle>/wind``)."""
        channel = f"{vehicle}/wind"
        self.publish(channel, messages.wind_message(utime, self.seq(channel), vehicle, velocity))

    def edited(self, edit, why: str | None, utime: int) -> None:
        """The engine's answer to a scene edit (``scene/edited``): applied, or why not."""
        channel = "scene/edited"
        self.publish(channel, messages.edit_result_message(utime, self.seq(channel), edit, why))

    def clock(self, mode: int, scale: float, rates: dict[str, float], utime: int) -> None:
        self.publish("clock", messages.clock_message(utime, self.seq("clock"), mode, scale, rates))
