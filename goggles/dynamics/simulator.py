"""MultirotorSim: a batch of vehicles of one airframe, advanced many physics steps per launch.

On CUDA one thread per vehicle; on the CPU the vehicles are split across a thread pool (a Warp CPU
launch runs on one thread and releases the GIL). Every array lives on the device; ``state()`` copies.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import warp as wp

from goggles.checks import FLOAT32_MAX, INT32_MAX, is_whole
from goggles.control_modes import COMMAND_SIZE, ControlMode, control_mode
from goggles.dynamics import kernels
from goggles.dynamics.airframe import MAX_ROTORS, Airframe, load_airframe
from goggles.dynamics.model import (
    AirframeParams,
    Integrator,
    OtherVehicles,
    SimSettings,
    mat38,
    mat68,
    mat86,
    steps_per_sample,
)
from goggles.dynamics.settings import SimulatorSettings
from goggles.dynamics.wind import KNOT, WindSettings, vec5, wind_params
from goggles.errors import ConfigError
from goggles.runtime.device_copies import HostMirror, fetch
from goggles.runtime.device_memory import check_fits
from goggles.runtime.launches import Launches
from goggles.runtime.progress import load_kernels
from goggles.runtime.recorded_work import RecordedWork, recording, struct_key
from goggles.world.device_scene import DeviceScene
from goggles.world.queries import no_actors

GRAVITY = 9.81  # m/s^2, as FlightGoggles


@dataclass
class VehicleStates:
    """Host copy of the batch state at ``time``; arrays are indexed by vehicle first."""

    time: float
    """Simulated time, s."""
    position: np.ndarray
    """(n, 3) m, world ENU."""
    velocity: np.ndarray
    """(n, 3) m/s, world."""
    attitude: np.ndarray
    """(n, 4) quaternion (w, x, y, z), body FLU -> world."""
    rates: np.ndarray
    """(n, 3) rad/s, body."""
    rotor_speed: np.ndarray
    """(n, N) rad/s."""
    imu_accel: np.ndarray
    """(n, 3) m/s^2, latest IMU sample in the IMU frame (specific force + bias + noise)."""
    imu_gyro: np.ndarray
    """(n, 3) rad/s, latest IMU sample in the IMU frame."""
    crashed: np.ndarray
    """(n,) bool: stopped by a crash (CRASH response) until reset."""
    wind: np.ndarray
    """(n, 3) m/s, world: the air's velocity where each vehicle was at its last step (steady wind,
    turbulence and gusts; ``goggles.dynamics.wind``)."""


@dataclass(frozen=True)
class ContactReport:
    """The first contact of a vehicle's collision shape with the world, or with another vehicle of its
    ``Swarm``, since contacts were last taken."""

    vehicle: int
    step: int
    """Global physics step index at which it was detected."""
    point: np.ndarray
    """(3,) m, world: the obstacle point."""
    normal: np.ndarray
    """(3,) unit, world, from the obstacle towards the vehicle."""
    depth: float
    """m of penetration."""
    other: int = -1
    """-1: the world; else the other vehicle's index in the ``Swarm`` (``Swarm.vehicle``)."""


#: Bytes a vehicle takes at its peak while a simulator is built (its states, parameters, random
#: streams and host copies; about 1.6 kB stay, measured for fg-quad on the CPU).
BYTES_PER_VEHICLE = 2048


class MultirotorSim:
    """A batch of simulated multirotors of one airframe.

    Args:
        airframe: the vehicle type (an Airframe, or a preset's name or a TOML path for ``load_airframe``).
        num_vehicles: batch size.
        settings: how it simulates (``SimulatorSettings``: step, integrator, floor, collisions, IMU,
            noise, seed; default FlightGoggles' 960 Hz over a floor at z = 0).
        device: Warp device; None picks Warp's default.
        world: the scene (a ``goggles.world.DeviceScene`` on the same device, with its placed actors):
            the ground-effect height is a downward ray into it, and the vehicles' collision shapes are
            tested against it (its ``obstacles``: not other vehicles' bodies) every physics step. None:
            the floor plane only, no collisions.
    """

    def __init__(
        self,
        airframe: Airframe | str | Path,
        num_vehicles: int = 1,
        settings: SimulatorSettings | None = None,
        *,
        device: wp.context.Devicelike = None,
        world=None,
    ):
        airframe = airframe if isinstance(airframe, Airframe) else load_airframe(airframe)
        simulation = settings if settings is not None else SimulatorSettings()
        if not isinstance(simulation, SimulatorSettings):
            raise ConfigError(f"a simulator's settings are a SimulatorSettings, got {simulation!r}")
        if not is_whole(num_vehicles, 1, INT32_MAX):
            raise ConfigError(f"num_vehicles must be an integer >= 1, got {num_vehicles!r}")
        if world is not None and not isinstance(world, DeviceScene):
            raise ConfigError(f"world must be a goggles.world.DeviceScene or None, got {world!r}")
        self.simulation = simulation
        """How it simulates (``SimulatorSettings``); ``settings`` is their Warp struct, as kernels read it."""
        num_vehicles, seed, dt = int(num_vehicles), simulation.seed, simulation.dt
        imu_rate, threads = simulation.imu_rate, simulation.threads
        imu_mount = None if simulation.imu_mount is None else np.reshape(simulation.imu_mount, (3, 3))
        decimation = 1 if imu_rate is None else steps_per_sample(1.0 / dt, imu_rate)
        if decimation is None:
            raise ConfigError(f"IMU rate {imu_rate:g} Hz must divide the physics rate {1.0 / dt:g} Hz")
        self.airframe = airframe
        self.num_vehicles = n = num_vehicles
        self.device = d = wp.get_device(device)
        check_fits(d, n * BYTES_PER_VEHICLE, f"simulating {n} vehicles", "simulate fewer")
        self.dt = dt
        self.imu_decimation = decimation
        self.step_count = 0
        self._states: VehicleStates | None = None
        self._version, self._packed_version = 0, -1  # state changes, and the one the host copy shows
        self.threads = 1 if d.is_cuda else max(1, min(threads or os.cpu_count() or 1, n))
        self._pool = (
            ThreadPoolExecutor(self.threads, thread_name_prefix="goggles-dynamics") if self.threads > 1 else None
        )
        if world is not None and world.device != d:
            raise ConfigError(f"the world is on {world.device}, the simulator on {d}: use one device")
        self.world = world  # keeps the meshes alive while their ids are used

        settings = SimSettings()
        settings.dt = dt
        settings.gravity = GRAVITY
        self.integrator = Integrator(airframe.integrator if simulation.integrator is None else simulation.integrator)
        settings.integrator = int(self.integrator)
        settings.ground_effect = int(simulation.ground_effect)
        settings.floor_z = 0.0 if simulation.floor_z is None else float(simulation.floor_z)
        settings.floor_contact = 0 if simulation.floor_z is None else 1
        settings.world_mesh = wp.uint64(0) if world is None else world.mesh.id
        settings.collision_response = int(simulation.collisions)
        settings.imu_decimation = self.imu_decimation
        settings.disturbances = int(simulation.disturbances)
        settings.imu_noise = int(simulation.imu_noise)
        settings.wind = wind_params(simulation.wind, d, n)
        self.wind = simulation.wind
        """The run's air (``SimulatorSettings.wind``); ``set_wind`` gives vehicles their own."""
        self.settings = settings
        self._imu_mount = imu_mount
        self.airframes: list[Airframe] = [airframe] * n
        """Each vehicle's airframe: ``airframe`` until ``set_airframes`` gives one its own values."""
        nominal = device_params(airframe, dt, dt * self.imu_decimation, imu_mount)
        self._param_rows = [nominal] * n
        self.airframe_params = wp.array(self._param_rows, dtype=AirframeParams, device=d)

        state = kernels.VehicleState()
        for name in (
            "position",
            "velocity",
            "rates",
            "accel_bias",
            "gyro_bias",
            "imu_accel",
            "imu_gyro",
            "filter_y",
            "filter_dy",
            "integral",
        ):
            setattr(state, name, wp.zeros(n, dtype=wp.vec3, device=d))
        state.attitude = wp.zeros(n, dtype=wp.quat, device=d)
        state.rotor_speed = wp.zeros(n, dtype=kernels.vec8, device=d)
        state.rng = wp.zeros(n, dtype=wp.uint32, device=d)
        state.mode = wp.zeros(n, dtype=wp.int32, device=d)
        state.command = wp.zeros(n, dtype=kernels.vec8, device=d)
        state.start_position = wp.zeros(n, dtype=wp.vec3, device=d)
        state.start_attitude = wp.zeros(n, dtype=wp.quat, device=d)
        state.crashed = wp.zeros(n, dtype=wp.int32, device=d)
        state.contact_step = wp.full(n, -1, dtype=wp.int32, device=d)
        state.contact_point = wp.zeros(n, dtype=wp.vec3, device=d)
        state.contact_normal = wp.zeros(n, dtype=wp.vec3, device=d)
        state.contact_depth = wp.zeros(n, dtype=float, device=d)
        state.contact_other = wp.full(n, -1, dtype=wp.int32, device=d)
        state.clock = wp.zeros(1, dtype=wp.int32, device=d)
        state.turbulence = wp.zeros(n, dtype=vec5, device=d)
        state.wind = wp.zeros(n, dtype=wp.vec3, device=d)
        self.state_arrays = state
        self._commands: dict[int, tuple[wp.array, wp.array]] = {}
        # The packed rows carry a queue of IMU samples (record_imu) after the state: one copy brings both.
        self.imu_queue, self._imu_queued = simulation.imu_queue, 0
        self.collide_actors = simulation.actors
        self._contacts_read = -1  # the host copy whose contacts were taken (and cleared on the device)
        columns = kernels.PACKED_COLUMNS + kernels.IMU_COLUMNS * simulation.imu_queue
        self._packed = wp.zeros((n, columns), dtype=wp.float64, device=d)
        self._packed_host = HostMirror(self._packed)
        self._no_actors = no_actors(d)
        self.others = no_others(d)
        """The vehicles this batch meets (``meet``): none until a ``Swarm`` joins it to others."""
        load_kernels(kernels, d)
        self._recorded = RecordedWork(self.launch_steps, d, enabled=simulation.recorded)
        self._launches = Launches(d)
        self.seed = seed
        self.reset()

    # ------------------------------------------------------------------ set-up

    def reset(
        self,
        position: np.ndarray | None = None,
        attitude: np.ndarray | None = None,
        velocity: np.ndarray | None = None,
        rates: np.ndarray | None = None,
        rotor_speed: np.ndarray | float | None = None,
    ) -> None:
        """Put every vehicle at rest (or in the given state), clear biases, filters and time, re-seed.

        Args:
            position: (n, 3) or (3,) m; default the origin.
            attitude: (n, 4) or (4,) quaternion (w, x, y, z); default level, facing +x.
            velocity: (n, 3) or (3,) m/s; default zero.
            rates: (n, 3) or (3,) rad/s; default zero.
            rotor_speed: (n, N), (N,) or a scalar, rad/s; default zero.
        """
        n, N = self.num_vehicles, self.airframe.num_rotors
        # Every value checked before any is set: a refused reset leaves the vehicles as they were.
        vectors = {"position": position, "velocity": velocity, "rates": rates}
        rows = {name: self._rows(value, 3, name, 0.0) for name, value in vectors.items()}
        q = self._rows(attitude, 4, "attitude", 0.0) if attitude is not None else np.tile([1.0, 0, 0, 0], (n, 1))
        norm = np.linalg.norm(q, axis=1, keepdims=True)
        if np.any(norm < 1e-9):
            raise ConfigError("attitude quaternions must be non-zero (w, x, y, z)")
        rotors = np.zeros((n, MAX_ROTORS), np.float32)
        rotors[:, :N] = self._rows(rotor_speed, N, "rotor_speed", 0.0)
        top = np.array([af.max_speed for af in self.airframes], np.float32)[:, None]
        if np.any(rotors < 0) or np.any(rotors[:, :N] > top):
            raise ConfigError(f"rotor_speed must be 0 to the airframe's max_speed ({top.min():g} rad/s): {rotor_speed}")
        s = self.state_arrays
        for name, values in rows.items():
            getattr(s, name).assign(values)
        s.start_position.assign(s.position)
        s.attitude.assign((q / norm)[:, [1, 2, 3, 0]].astype(np.float32))  # Warp stores (x, y, z, w)
        s.start_attitude.assign(s.attitude)
        s.crashed.zero_()
        s.contact_step.fill_(-1)
        s.rotor_speed.assign(rotors)
        gravity_up = np.tile([0.0, 0.0, GRAVITY], (n, 1)).astype(np.float32)
        s.imu_accel.assign(gravity_up)  # a sensible first sample before the first IMU step
        for name in ("accel_bias", "gyro_bias", "imu_gyro", "filter_y", "filter_dy", "integral", "turbulence", "wind"):
            getattr(s, name).zero_()
        wp.launch(kernels.seed_kernel, dim=n, inputs=[self.seed], outputs=[s.rng], device=self.device)
        s.clock.zero_()
        self.step_count = 0
        self.changed()

    def set_wind(self, vehicles, speed, from_deg, w20_knots) -> None:
        """Give ``vehicles`` a steady wind of their own (``speed`` m/s at the reference height, blowing
        from ``from_deg``) and turbulence of W20 ``w20_knots`` (MIL-F-8785C: 15 light, 30 moderate, 45
        severe; 0 none), each an array over them; the others keep theirs (at first the run's). The
        profile, gusts and field stay the run's (``SimulatorSettings.wind``)."""
        chosen = self._indices(vehicles)
        values = [np.broadcast_to(np.asarray(v, np.float64), chosen.shape) for v in (speed, from_deg, w20_knots)]
        if not all(np.all(np.isfinite(v)) for v in values) or np.any(values[0] < 0) or np.any(values[2] < 0):
            raise ConfigError("wind speed and turbulence must be finite and >= 0, the direction finite")
        wind = self.settings.wind
        if not wind.per_vehicle:  # every vehicle starts from the run's
            s = self.wind or WindSettings()
            wind.vehicle_towards.fill_(wind.towards)
            wind.vehicle_speed.fill_(s.speed)
            wind.vehicle_w20.fill_(wind.w20)
            wind.per_vehicle = 1
        towards, speeds, w20 = wind.vehicle_towards.numpy(), wind.vehicle_speed.numpy(), wind.vehicle_w20.numpy()
        angle = np.radians(values[1])
        towards[chosen] = -np.stack([np.sin(angle), np.cos(angle), np.zeros_like(angle)], axis=1)
        speeds[chosen], w20[chosen] = values[0], values[2] * KNOT
        wind.vehicle_towards.assign(towards)
        wind.vehicle_speed.assign(speeds)
        wind.vehicle_w20.assign(w20)

    def set_gusts(self, vehicles, start_s, duration_s, peak) -> None:
        """Give ``vehicles`` a 1-cosine gust each, besides the run's: from sim time ``start_s`` (this
        simulator's clock, ``time()``) for ``duration_s``, ``peak`` (k, 3) m/s at its middle, world ENU;
        each an array over them (a zero peak: none). The others keep theirs.

        Raises:
            ConfigError: a value that is not finite, or a duration not above 0.
        """
        chosen = self._indices(vehicles)
        start = np.broadcast_to(np.asarray(start_s, np.float64), chosen.shape)
        duration = np.broadcast_to(np.asarray(duration_s, np.float64), chosen.shape)
        peak = np.broadcast_to(np.asarray(peak, np.float64), (*chosen.shape, 3))
        if not (np.all(np.isfinite(start)) and np.all(np.isfinite(peak)) and np.all(duration > 0)):
            raise ConfigError("gusts need finite starts and peaks and durations above 0 s")
        wind = self.settings.wind
        for array, values in (
            (wind.vehicle_gust_start, start),
            (wind.vehicle_gust_duration, duration),
            (wind.vehicle_gust_peak, peak),
        ):
            host = array.numpy()
            host[chosen] = values
            array.assign(host)
        wind.vehicle_gusts = 1

    def set_airframes(self, airframes: Sequence[Airframe], vehicles: Sequence[int] | None = None) -> None:
        """Give vehicles their own parameters (domain randomisation): ``airframes[k]`` for vehicle
        ``vehicles[k]`` (default every vehicle in order). The simulated body and its controller both
        use them; each must have the batch's rotor count.

        Raises:
            ConfigError: a count or rotor layout that does not fit the batch.
        """
        vehicles = range(self.num_vehicles) if vehicles is None else self._indices(vehicles).tolist()
        if len(airframes) != len(vehicles):
            raise ConfigError(f"{len(airframes)} airframes for vehicles {list(vehicles)} of {self.num_vehicles}")
        odd = next((af for af in airframes if not isinstance(af, Airframe)), None)
        if odd is not None:
            raise ConfigError(f"airframes are Airframes (goggles.dynamics.load_airframe), got {odd!r}")
        for v, af in zip(vehicles, airframes):
            if af.num_rotors != self.airframe.num_rotors:
                raise ConfigError(
                    f"airframe {af.name!r} has {af.num_rotors} rotors, the batch {self.airframe.num_rotors}"
                )
            self.airframes[v] = af
            self._param_rows[v] = device_params(af, self.dt, self.dt * self.imu_decimation, self._imu_mount)
        self.airframe_params.assign(wp.array(self._param_rows, dtype=AirframeParams, device="cpu"))

    def reset_where(
        self,
        mask: wp.array,
        position: wp.array,
        attitude: wp.array,
        rotor_speed: wp.array,
        episode: wp.array,
        first_index: int = 0,
    ) -> None:
        """Reset, on the device and without a host copy, the vehicles whose ``mask`` (n,) int32 is set:
        at rest at ``position`` (n,) vec3 and ``attitude`` (n,) Warp quat (x, y, z, w), rotors at
        ``rotor_speed`` (n,) rad/s, their random streams re-seeded from (seed, ``first_index`` + vehicle,
        ``episode``), and ``episode`` counts up. The others go on untouched (a vector environment's autoreset)."""
        wp.launch(
            kernels.reset_vehicles_kernel,
            dim=self.num_vehicles,
            inputs=[mask, position, attitude, rotor_speed, self.seed, int(first_index), episode, GRAVITY],
            outputs=[self.state_arrays],
            device=self.device,
        )
        self.changed()

    def _indices(self, vehicles) -> np.ndarray:
        """``vehicles`` as an array of vehicle indices, each 0 to n - 1, at least one."""
        try:
            chosen = np.asarray(vehicles).ravel()
        except (TypeError, ValueError, RuntimeError):  # ragged, or a tensor on a GPU
            chosen = np.zeros(0, np.float64)
        if chosen.dtype.kind not in "iu" or chosen.size == 0 or chosen.min() < 0 or chosen.max() >= self.num_vehicles:
            raise ConfigError(f"vehicles must be indices 0..{self.num_vehicles - 1}, got {vehicles!r}")
        return chosen.astype(np.int32)

    def _rows(self, value, width: int, what: str, default: float) -> np.ndarray:
        if value is None:
            return np.full((self.num_vehicles, width), default, np.float32)
        return _rows_of(value, self.num_vehicles, width, what)

    def set_command(
        self, mode: ControlMode, values: Sequence[float] | np.ndarray, vehicles: Sequence[int] | None = None
    ) -> None:
        """Command every vehicle (``values`` (k,)) or each vehicle (``values`` (n, k)); with
        ``vehicles``, only those (``values`` (k,) or (len(vehicles), k)), the others keep theirs.

        See ``goggles.dynamics.control`` for each mode's values and units. Non-finite values are
        refused and the previous command stays.
        """
        mode = control_mode(mode)
        if mode == ControlMode.RC:
            raise ConfigError("RC commands are a flight controller's sticks: for a vehicle its firmware flies")
        width = COMMAND_SIZE[mode] or self.airframe.num_rotors
        chosen = np.arange(self.num_vehicles) if vehicles is None else self._indices(vehicles)
        rows = _rows_of(values, len(chosen), width, f"{mode.name} command")
        if mode == ControlMode.ATTITUDE and np.any(np.linalg.norm(rows[:, 1:5].astype(np.float64), axis=1) < 1e-6):
            raise ConfigError("ATTITUDE command quaternion (values 2-5, w x y z) must be non-zero")
        commands = np.zeros((len(chosen), MAX_ROTORS), np.float32)
        commands[:, :width] = rows
        indices, values = self._command_buffers(len(chosen))
        indices.assign(chosen.astype(np.int32, copy=False))  # stream-ordered after the launch that read them last
        values.assign(commands)
        wp.launch(
            kernels.set_commands_kernel,
            dim=len(chosen),
            inputs=[indices, values, int(mode)],
            outputs=[self.state_arrays],
            device=self.device,
        )

    def _command_buffers(self, n: int) -> tuple[wp.array, wp.array]:
        """Device arrays for a command of ``n`` vehicles, made once per size (a firmware commands its
        vehicle at every FC tick: new arrays each time cost more than the step)."""
        buffers = self._commands
        if n not in buffers:
            buffers[n] = (
                wp.empty(n, dtype=wp.int32, device=self.device),
                wp.empty(n, dtype=kernels.vec8, device=self.device),
            )
        return buffers[n]

    # ------------------------------------------------------------------ running

    @property
    def time(self) -> float:
        """Simulated time since the last reset, s."""
        return self.step_count * self.dt

    def step(self, steps: int = 1) -> None:
        """Advance every vehicle by ``steps`` physics steps (one launch per CPU thread)."""
        if not is_whole(steps, 0, INT32_MAX):  # the kernel's int32 loop count
            raise ConfigError(f"steps must be an integer from 0 to {INT32_MAX}, got {steps!r}")
        if steps == 0:
            return
        self._recorded(int(steps), key=self._recording_key)
        self.stepped(steps)

    def launch_steps(self, steps: int) -> None:
        """The device work of ``step`` alone (recordable: a learning environment records it with its
        own work); ``stepped`` keeps the books after it."""
        if self._pool is None or recording(self.device):  # shares across threads only speed it up
            self._launch(0, self.num_vehicles, steps)
        else:
            bounds = np.linspace(0, self.num_vehicles, self.threads + 1).astype(int)
            list(self._pool.map(lambda ab: self._launch(ab[0], ab[1] - ab[0], steps), zip(bounds[:-1], bounds[1:])))
        self._launches(kernels.advance_clock_kernel, 1, [int(steps)], [self.state_arrays])

    def stepped(self, steps: int) -> None:
        """``launch_steps(steps)`` ran: the host's step count and state copy follow."""
        self.step_count += steps
        self.changed()

    def _recording_key(self) -> tuple[bytes, bytes, bytes]:
        """What step's launches pass by value besides the step count: placing actors changes it."""
        return struct_key(self._actors()), struct_key(self.settings), struct_key(self.others)

    def meet(self, others: OtherVehicles) -> None:
        """Test the vehicles against ``others`` (filled before each launch) from now on: ``Swarm``'s work."""
        if others.count and not others.first + self.num_vehicles <= others.count:
            raise ValueError(f"vehicles {others.first}.. of {others.count} cannot hold a batch of {self.num_vehicles}")
        self.others = others

    def _actors(self):
        return self.world.obstacles if self.world is not None and self.collide_actors else self._no_actors

    def _launch(self, first: int, count: int, steps: int) -> None:
        inputs = [self.airframe_params, self.settings, self._actors(), self.others, int(first), int(steps)]
        self._launches(kernels.step_vehicles_kernel, count, inputs, [self.state_arrays])

    def changed(self) -> None:
        """The device state changed: the host copy and the states built from it are stale (the
        simulator's own calls say so; work it did not run, such as a replayed recording, must too)."""
        self._version += 1
        self._states = None

    def _host_rows(self) -> np.ndarray:
        """(n, PACKED_COLUMNS) host copy of the state: one packing launch and one copy per state change,
        shared by ``states`` and ``contacts`` (a view of reused memory: readers copy what they keep)."""
        if self._packed_version != self._version:
            self._launches(kernels.pack_states_kernel, self.num_vehicles, [self.state_arrays], [self._packed])
            fetch([self._packed_host])
            self._packed_version = self._version
        return self._packed_host.array

    def states(self) -> VehicleStates:
        """The batch state on the host: copied once per state change, however many readers ask
        (the engine's IMU, state and cameras at one step share one copy). Treat it as read-only."""
        if self._states is not None:
            return self._states
        rows = self._host_rows()
        N = self.airframe.num_rotors
        states = VehicleStates(
            time=self.time,
            position=rows[:, 0:3].copy(),
            velocity=rows[:, 3:6].copy(),
            attitude=rows[:, [9, 6, 7, 8]],  # (w, x, y, z)
            rates=rows[:, 10:13].copy(),
            rotor_speed=rows[:, 13 : 13 + N].copy(),
            imu_accel=rows[:, 21:24].copy(),
            imu_gyro=rows[:, 24:27].copy(),
            crashed=rows[:, 27] != 0,
            wind=rows[:, 37:40].copy(),
        )
        for value in vars(states).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False  # shared by every reader of this step
        self._states = states
        return states

    @property
    def host_current(self) -> bool:
        """Whether the host copy shows the present device state (reading it now costs no copy)."""
        return self._packed_version == self._version

    def contacts(self) -> list[ContactReport]:
        """First contact of each vehicle that touched the world (or another vehicle of its ``Swarm``)
        since contacts were last taken; taking them clears them on the device."""
        rows = self._host_rows()
        if self._contacts_read == self._packed_version:
            return []
        self._contacts_read = self._packed_version
        steps = rows[:, 28]
        touched = np.flatnonzero(steps >= 0)
        if touched.size:
            self.state_arrays.contact_step.fill_(-1)
        return [
            ContactReport(int(i), int(r[28]), r[29:32].copy(), r[32:35].copy(), float(r[35]), int(r[36]))
            for i, r in zip(touched, rows[touched])
        ]

    def record_imu(self) -> int:
        """Keep the present IMU sample on the device, for ``take_imu``; returns the samples queued.
        No copy: a batch of samples reaches the host in one."""
        if self._imu_queued == self.imu_queue:
            raise RuntimeError(f"the IMU queue holds {self.imu_queue} samples: take_imu() first")
        column = kernels.PACKED_COLUMNS + kernels.IMU_COLUMNS * self._imu_queued
        self._launches(kernels.record_imu_kernel, self.num_vehicles, [self.state_arrays, column], [self._packed])
        self._imu_queued += 1
        self._packed_version = -1  # the host copy no longer holds every queued sample
        return self._imu_queued

    def take_imu(self) -> np.ndarray:
        """The queued IMU samples, (samples, vehicles, 6): accel (m/s^2) then gyro (rad/s), IMU frame,
        oldest first (one copy, shared with ``states``); the queue is then empty."""
        rows = self._host_rows()
        count, self._imu_queued = self._imu_queued, 0
        queue = rows[:, kernels.PACKED_COLUMNS : kernels.PACKED_COLUMNS + kernels.IMU_COLUMNS * count]
        return queue.reshape(self.num_vehicles, count, kernels.IMU_COLUMNS).transpose(1, 0, 2).copy()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def no_others(device) -> OtherVehicles:
    """A batch that meets no other vehicle."""
    others = OtherVehicles()
    others.position = wp.zeros(0, dtype=wp.vec3, device=device)
    others.velocity = wp.zeros(0, dtype=wp.vec3, device=device)
    others.radius = wp.zeros(0, dtype=float, device=device)
    others.count, others.first = 0, 0
    return others


def _rows_of(value, n: int, width: int, what: str) -> np.ndarray:
    """``value`` as (n, width) float32 rows: a scalar or one (width,) row for all, or (n, width)."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{what} must be numbers, got {value!r}") from None
    if array.ndim == 0:
        array = np.full((width,), float(array))
    if array.shape == (width,):
        array = np.tile(array, (n, 1))
    if array.shape != (n, width) or not np.all(np.abs(array) <= FLOAT32_MAX):  # NaN fails too
        raise ConfigError(
            f"{what} must be finite (in float32) with shape ({width},) or ({n}, {width}), got {np.shape(value)}"
        )
    return array.astype(np.float32)


def device_params(af: Airframe, dt: float, imu_dt: float, imu_mount: np.ndarray | None) -> AirframeParams:
    """Device parameters of an airframe: matrices padded to 8 rotors, noise scaled to the step."""
    N = af.num_rotors
    allocation = np.zeros((6, MAX_ROTORS))
    allocation[:, :N] = af.allocation
    spin_axes = np.zeros((3, MAX_ROTORS))
    spin_axes[:, :N] = (af.rotor_axes * af.rotor_spins[:, None]).T
    R_BI = np.eye(3) if imu_mount is None else np.asarray(imu_mount, dtype=np.float64)
    if R_BI.shape != (3, 3) or not np.allclose(R_BI @ R_BI.T, np.eye(3), atol=1e-6) or np.linalg.det(R_BI) < 0:
        raise ConfigError("imu_mount must be a 3x3 rotation matrix (IMU frame -> body frame)")

    p = AirframeParams()
    p.mass = af.mass
    p.inertia = wp.mat33(*af.inertia.ravel())
    p.inertia_inv = wp.mat33(*np.linalg.inv(af.inertia).ravel())
    p.allocation = mat68(*allocation.ravel())
    p.mixer = mat86(*np.linalg.pinv(allocation).ravel())
    p.spin_axes = mat38(*spin_axes.ravel())
    p.cf = af.thrust_coefficient
    p.tau_up, p.tau_down = af.time_constant_up, af.time_constant_down
    p.min_speed, p.max_speed = af.min_speed, af.max_speed
    p.rotor_inertia = af.rotor_inertia
    p.rotor_radius = af.rotor_radius
    p.arm_length = af.arm_length
    p.drag = af.drag_coefficient
    p.moment_coefficient = wp.vec3(*af.moment_coefficient)
    p.linear_drag = wp.vec3(*af.linear_drag_body)
    p.quadratic_drag = wp.vec3(*af.quadratic_drag_body)
    p.linear_moment_drag = wp.vec3(*af.linear_moment_drag)
    p.quadratic_moment_drag = wp.vec3(*af.quadratic_moment_drag)
    p.force_sigma = float(np.sqrt(af.force_density / dt))
    p.moment_sigma = float(np.sqrt(af.moment_density / dt))
    p.accel_sigma = wp.vec3(*(np.asarray(af.imu.accel_noise) / np.sqrt(imu_dt)))
    p.gyro_sigma = wp.vec3(*(np.asarray(af.imu.gyro_noise) / np.sqrt(imu_dt)))
    p.accel_walk = wp.vec3(*(np.asarray(af.imu.accel_bias_walk) * np.sqrt(imu_dt)))
    p.gyro_walk = wp.vec3(*(np.asarray(af.imu.gyro_bias_walk) * np.sqrt(imu_dt)))
    p.R_BI = wp.mat33(*R_BI.ravel())
    p.rate_kp, p.rate_ki, p.rate_kd = (wp.vec3(*k) for k in (af.rate_kp, af.rate_ki, af.rate_kd))
    p.rate_integrator_limit = af.rate_integrator_limit
    p.max_rate = af.max_rate
    p.filter_p, p.filter_q = af.filter_p, af.filter_q
    p.k_position, p.k_velocity = wp.vec3(*af.k_position), wp.vec3(*af.k_velocity)
    p.k_attitude, p.k_rate = wp.vec3(*af.k_attitude), wp.vec3(*af.k_rate)
    p.max_horizontal_acceleration = af.max_horizontal_acceleration
    p.max_vertical_acceleration = af.max_vertical_acceleration
    p.collision_shape = int(af.collision_shape)
    p.collision_size = wp.vec3(*af.collision_size)
    p.crash_speed = af.crash_speed
    p.meeting_radius = af.meeting_radius
    return p
