"""What the engine's sensor events do: render a camera group from its vehicles' poses (with the people
posed and the vehicles' bodies placed for that instant) and publish its images and events; measure a
range sensor; scan a LiDAR over its coming revolution."""

from __future__ import annotations

import time

import numpy as np

from goggles.clock import ClockMode
from goggles.engine.outputs import Outputs
from goggles.engine.run_state import RunState
from goggles.engine.status import RateLog, StageTimes
from goggles.rig.cameras import Camera, CameraGroup
from goggles.rig.rig import Rig
from goggles.rig.runfile import RangeSensorConfig, RunConfig
from goggles.rig.vehicles import pose_after
from goggles.runtime.profile import stage
from goggles.sensors.ranges import RangeSensor


class SensorEvents:
    def __init__(self, rig: Rig, config: RunConfig, outputs: Outputs, rates: RateLog, times: StageTimes, now: RunState):
        self.rig, self.config, self.outputs, self.rates, self.times, self.now = rig, config, outputs, rates, times, now
        self._bodies_step = -1  # the step the vehicles' bodies were last placed at (``carriers``)

    def camera_pose(self, camera: Camera) -> np.ndarray:
        return self.rig.vehicles[camera.vehicle].pose(self.config.extrapolate) @ camera.T_BC

    def render(self, group: CameraGroup) -> None:
        """Render ``group`` now, from its vehicles' poses now, and publish its outputs. Live, an event
        camera renders at its newest pose, stamped with the pose's time: its events fall on the
        poses' clock (a motion-capture system's), where they happened, not when they were rendered."""
        with stage("frame"):
            self._render(group)

    def _render(self, group: CameraGroup) -> None:
        with stage("people and bodies placed"):
            self._pose_people()
            t = time.perf_counter()
            carriers = self.carriers(c.vehicle for c in group.cameras)
        live = self.now.mode == ClockMode.LIVE
        if live and group.events is not None:
            vehicles = [self.rig.vehicles[c.vehicle] for c in group.cameras]
            poses = np.stack([v.T_WB @ c.T_BC for v, c in zip(vehicles, group.cameras)])
            utime = max(v.pose_utime for v in vehicles)
        else:
            poses = np.stack([self.camera_pose(c) for c in group.cameras])
            utime = time.time_ns() // 1000 if live else self.now.utime()
        images, detections, events = group.render(
            poses, lambda dt: self._poses_after(group, poses, dt), self.rig.built.gate_poses, carriers, key=utime
        )
        self.times.add("render", time.perf_counter() - t)
        pose_utimes = [
            self.rig.vehicles[c.vehicle].pose_utime if self.rig.vehicles[c.vehicle].sim is None else utime
            for c in group.cameras
        ]
        with stage("publishing"):
            self.outputs.camera_frame(group.cameras, poses, images, detections, utime, pose_utimes)
            if events is not None:
                start, end = group.events.window
                self.outputs.events(group.cameras, events, start // 1000, end // 1000)
        for name in group.names:  # every camera of the group, each under its own name
            self.rates.note(name, self.now.t)
        self.times.add("frame", time.perf_counter() - t)

    def render_due(self, group: CameraGroup) -> int:
        """Render ``group``; the steps to its next render (``CameraGroup.next_steps``)."""
        self.render(group)
        return group.next_steps(self.now.dt)

    def measure_cost(self) -> float | None:
        """Wall seconds per sim second from one warm-up render of every group: a sane first scale."""
        cost = 0.0
        for group in self.rig.groups:
            t = time.perf_counter()
            poses = np.stack([self.camera_pose(c) for c in group.cameras])
            carriers = self.carriers(c.vehicle for c in group.cameras)
            if group.events is not None:  # a run after another: the warm-up's time is not after the last
                group.events.reset()
            group.render(poses, T_WA=self.rig.built.gate_poses, carriers=carriers)
            if group.events is not None:  # a warm-up's pixels are not the run's
                group.events.reset()
            cost += (time.perf_counter() - t) * self.config.physics_rate / group.period_steps
        return cost or None

    def publish_ranges(self, config: RangeSensorConfig, sensor: RangeSensor) -> None:
        carriers = self.carriers([config.vehicle])
        T_WS = self.rig.vehicles[config.vehicle].pose(self.config.extrapolate) @ config.T_BS
        name, utime = f"{config.vehicle}/{config.name}", self.now.utime()
        self.outputs.ranges(name, config.model, sensor.measure(T_WS[None], carriers, key=utime)[0].ravel(), utime)
        self.rates.note(name, self.now.t)

    def publish_lidar(self, config, lidar) -> None:
        """A scan over the coming revolution, each point from where the sensor will be when it fires."""
        carriers = self.carriers([config.vehicle])
        vehicle = self.rig.vehicles[config.vehicle]
        T_WB = vehicle.pose(self.config.extrapolate)
        last = (lidar.model.columns - 1) / (lidar.model.columns * lidar.model.rate_hz)  # the last firing
        carrier = -1 if carriers is None else int(carriers[0])
        utime = self.now.utime()
        scan = lidar.scan(T_WB @ config.T_BS, pose_after(vehicle, T_WB, last) @ config.T_BS, carrier, utime)
        name = f"{config.vehicle}/{config.name}"
        self.outputs.lidar(name, config.model, scan, utime)
        self.rates.note(name, self.now.t)

    def update_people(self) -> None:
        """Skin the people whose skeletons came (replay applies them as the log goes)."""
        if self.rig.crowd.busy:
            self.rig.crowd.update(self.now.log_ns() * 1e-9)

    def carriers(self, vehicles) -> np.ndarray | None:
        """Place what moves for a sensor instant, and the body instance of each of ``vehicles`` (names):
        a sensor carried by one does not see it (None where no bodies are placed: a run of one
        vehicle). Tracked props take their newest poses. The bodies are placed once per step (a
        replay's poses of a step come before its events); live, where poses are carried forward to the
        wall time, every time."""
        self.rig.props.place_tracked()
        if not self.rig.crowd.bodies:
            return None
        if self.now.mode == ClockMode.LIVE or self._bodies_step != self.now.step:
            self.rig.crowd.place_vehicles([v.pose(self.config.extrapolate) for v in self.rig.vehicles.values()])
            self._bodies_step = self.now.step
        instances = dict(zip(self.rig.vehicles, self.rig.crowd.vehicle_instances()))
        return np.array([instances[name] for name in vehicles])

    def _pose_people(self) -> None:
        """Pose the BVH clips at the current time and skin the crowd: only when a camera needs it."""
        now = time.time() if self.now.mode == ClockMode.LIVE else self.now.t
        for avatar, motion in self.rig.clips:
            self.rig.crowd.offer(
                avatar.name, motion.pose(now * avatar.speed, units=avatar.units, up=avatar.up, T_WR=avatar.T_WR)
            )
        self.update_people()

    def _poses_after(self, group: CameraGroup, T_WC: np.ndarray, dt: np.ndarray) -> np.ndarray:
        """Each camera's pose ``dt[i]`` seconds from the frame's, along its vehicle's motion."""
        return np.stack(
            [
                pose_after(self.rig.vehicles[c.vehicle], T @ np.linalg.inv(c.T_BC), float(d)) @ c.T_BC
                for c, T, d in zip(group.cameras, T_WC, dt)
            ]
        )
