"""What the engine's vehicle events do: a firmware's tick, the IMU's samples, the state (and the
vehicle's status, its pilot's next waypoint), and contacts told as collisions once each."""

from __future__ import annotations

import numpy as np

from goggles.dynamics import ControlMode
from goggles.engine.outputs import Outputs
from goggles.engine.run_state import RunState
from goggles.engine.status import RateLog
from goggles.rig.rig import Rig
from goggles.rig.vehicles import Fleet, Vehicle


class VehicleEvents:
    def __init__(self, rig: Rig, outputs: Outputs, rates: RateLog, now: RunState):
        self.rig, self.outputs, self.rates, self.now = rig, outputs, rates, now

    def fly_firmware(self, vehicle: Vehicle) -> None:
        """A firmware tick: the vehicle's state (sim time, IMU, attitude) to its flight controller, whose
        motor outputs become its rotors' speeds until the next tick."""
        states = vehicle.sim.states()
        t = self.now.t
        speeds = vehicle.firmware.step(t, states, vehicle.row, vehicle.fc_period * self.now.dt)
        vehicle.sim.set_command(ControlMode.ROTOR_SPEEDS, speeds, vehicles=[vehicle.row])
        report = vehicle.firmware.due_report(t)
        if report is not None:
            self.outputs.fc_status(vehicle.name, report, self.now.utime())
        self.rates.note(f"{vehicle.name}/fc", t)

    def publish_imu(self, fleet: Fleet, event: str) -> None:
        """The IMU samples of this instant, published now, or queued on the device and published with
        their batch (``[[vehicle]] imu_batch``): one copy per batch instead of one per sample."""
        sim = fleet.sim
        if sim.imu_queue == 1:
            s, utime = sim.states(), self.now.utime()
            for vehicle in fleet.vehicles:
                self.outputs.imu(vehicle.name, s.imu_accel[vehicle.row], s.imu_gyro[vehicle.row], utime)
        else:
            fleet.imu_utimes.append(self.now.utime())
            if sim.record_imu() == sim.imu_queue:
                self._flush_imu(fleet)
        self.rates.note(event, self.now.t)

    def _flush_imu(self, fleet: Fleet) -> None:
        """Publish the IMU samples queued on the device, each with its own time."""
        for utime, samples in zip(fleet.imu_utimes, fleet.sim.take_imu()):
            for vehicle in fleet.vehicles:
                sample = samples[vehicle.row]
                self.outputs.imu(vehicle.name, sample[:3], sample[3:], utime)
        fleet.imu_utimes.clear()

    def publish_state(self, vehicle: Vehicle) -> None:
        """The vehicle's ground truth (and the air where it is, in a run with ``[wind]``) and, when it
        changed, its status; its pilot then takes the next waypoint if it reached one."""
        states, t, utime = vehicle.sim.states(), self.now.t, self.now.utime()
        self.outputs.state(vehicle.name, states, utime, row=vehicle.row)
        if self.rig.config.wind is not None:
            self.outputs.wind(vehicle.name, states.wind[vehicle.row], utime)
        vehicle.crashed = bool(states.crashed[vehicle.row])
        vehicle.hold_if_abandoned(t, states)
        status = vehicle.due_status(t)
        if status is not None:
            self.outputs.vehicle_status(vehicle.name, status, utime)
        if vehicle.pilot is not None and not vehicle.external_control:
            target = vehicle.pilot.update(states.position[vehicle.row])
            if target is not None:
                vehicle.sim.set_command(ControlMode.POSITION, target, vehicles=[vehicle.row])

    def publish_pending(self, force: bool) -> None:
        """Queued IMU samples and contacts wait on the device until an event has copied the state
        anyway (each keeps its own time): no copy of their own, unless ``force`` (a lockstep reply,
        the end of a run) needs them out now."""
        for fleet in self.rig.fleets:
            if not (force or fleet.sim.host_current):
                continue
            if fleet.imu_utimes:
                self._flush_imu(fleet)
            if fleet.contacts_unread:
                fleet.contacts_unread = False
                contacts = {c.vehicle: c for c in fleet.sim.contacts()}
                for vehicle in fleet.vehicles:
                    contact = contacts.get(vehicle.row)
                    self._touch(vehicle, contact, None if contact is None else round(contact.step * self.now.dt * 1e6))

    def touch_posed(self) -> None:
        """Live and replay: a vehicle placed from outside that touches the virtual world (a real drone
        in a virtual wall) is reported once per contact, stamped with its pose's time. Every pose
        taken is tested, in one launch for all of them (a pose inside a thin gate bar counts, even
        when the next pose of the same poll is through it); a vehicle never posed touches nothing."""
        vehicles = self.rig.vehicles.values()
        taken = [(k, vehicle, *pose) for k, vehicle in enumerate(vehicles) for pose in vehicle.untested]
        for vehicle in vehicles:
            vehicle.untested.clear()
        if self.rig.posed is None or not taken:
            return
        poses = np.stack([T for _, _, T, _ in taken])
        contacts = self.rig.posed.touching(poses, [k for k, *_ in taken], self.now.step)
        for (_, vehicle, _, utime), contact in zip(taken, contacts):
            self._touch(vehicle, contact, utime)

    def _touch(self, vehicle: Vehicle, contact, utime: int | None) -> None:
        """What a vehicle touched since the last look (``contact``; None: nothing): a collision is
        told when it touches something it did not touch before (a drone resting on the ground,
        which is a contact all along, hit by another). A contact with a vehicle takes the place of
        the world's in the record, so the ground it hid is taken to go on: not told again after."""
        if contact is None:
            vehicle.touching = frozenset()
            return
        touched = "world"
        if contact.other >= 0:
            sim, row = self.rig.swarm.vehicle(contact.other)
            touched = next(v.name for v in self.rig.vehicles.values() if v.sim is sim and v.row == row)
        if touched not in vehicle.touching:
            self.outputs.collision(vehicle.name, touched, contact, utime)
        hidden = vehicle.touching & {"world"} if touched != "world" else frozenset()  # the ground it hid
        vehicle.touching = hidden | {touched}
