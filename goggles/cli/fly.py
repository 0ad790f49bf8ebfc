"""goggles fly: one simulated vehicle, a controller and a set-point, its trajectory as CSV."""

from __future__ import annotations

import time
from pathlib import Path

from goggles.checks import FLOAT32_MAX
from goggles.cli.common import floats_between, positive, report, seed
from goggles.errors import ConfigError


def add_parser(commands) -> None:
    fly = commands.add_parser(
        "fly",
        help="fly the built-in multirotor simulator and write its trajectory as CSV",
        description="Simulate one vehicle from rest under a controller and write one CSV row per physics step "
        "(or per --decimate steps): t, position, velocity, quaternion (w, x, y, z), body rates, IMU specific force "
        "and angular rate, and one rotor_<i> speed column per rotor. World ENU, body FLU, SI units. A progress line "
        "each wall second on stderr.",
    )
    fly.add_argument("--preset", default="fg-quad", help="airframe preset name or TOML path (default %(default)s)")
    fly.add_argument("--duration", type=float, required=True, help="simulated seconds")
    fly.add_argument(
        "--controller",
        choices=sorted(_CONTROLLERS),
        default="position",
        help="what --setpoint commands (default %(default)s)",
    )
    fly.add_argument(
        "--setpoint",
        default=None,
        help="position x,y,z[,yaw]; velocity vx,vy,vz[,yaw]; attitude thrust,qw,qx,qy,qz; rates "
        "thrust,p,q,r; rotors/thrusts one value or one per rotor (default: hover in place, 1 m up "
        "for position); write --setpoint=-1,... when the first value is negative",
    )
    fly.add_argument(
        "--start",
        type=floats_between(3, 4, "--start"),
        default=None,
        help="start x,y,z[,yaw] at rest, m and rad; above z = 0 the rotors start at hover speed "
        "(default: on the ground at the origin, rotors stopped)",
    )
    fly.add_argument("--seed", type=seed, default=0, help="seed of the disturbance and IMU noise")
    fly.add_argument(
        "--integrator",
        choices=["euler", "rk4"],
        default=None,
        help="default: the preset's (fg-quad: euler, as FlightGoggles)",
    )
    fly.add_argument("--rate", type=positive, default=960.0, help="physics rate, Hz (default %(default)s)")
    fly.add_argument("--imu-rate", type=positive, default=None, help="IMU rate, Hz, dividing --rate (default: --rate)")
    fly.add_argument("--ground-effect", choices=["none", "cheeseman-bennett", "conyers"], default="none")
    fly.add_argument("--no-disturbances", action="store_true", help="turn the stochastic force and moment off")
    fly.add_argument("--no-imu-noise", action="store_true", help="turn IMU white noise and bias walk off")
    fly.add_argument("--decimate", type=int, default=1, help="write every Nth physics step")
    fly.add_argument("--device", default=None, help="Warp device: cpu, cuda or cuda:N")
    fly.add_argument("--out", type=Path, required=True, help="CSV file to write")
    fly.set_defaults(run=cmd_fly)


_CONTROLLERS = {
    "position": "POSITION",
    "velocity": "VELOCITY",
    "attitude": "ATTITUDE",
    "rates": "RATES",
    "rotors": "ROTOR_SPEEDS",
    "thrusts": "ROTOR_THRUSTS",
}


def _setpoint(args, airframe) -> list[float]:
    """The command values for --controller from --setpoint (or a hover default), validated."""

    from goggles.dynamics import GRAVITY

    n = airframe.num_rotors
    hover_thrust = airframe.mass * GRAVITY
    defaults = {
        "position": "0,0,1,0",
        "velocity": "0,0,0,0",
        "attitude": f"{hover_thrust},1,0,0,0",
        "rates": f"{hover_thrust},0,0,0",
        "rotors": f"{airframe.hover_speed}",
        "thrusts": f"{hover_thrust / n}",
    }
    forms = {
        "position": "x,y,z[,yaw] (m, rad)",
        "velocity": "vx,vy,vz[,yaw] (m/s, rad)",
        "attitude": "thrust,qw,qx,qy,qz (N)",
        "rates": "thrust,p,q,r (N, rad/s)",
        "rotors": f"one speed or {n} speeds (rad/s)",
        "thrusts": f"one thrust or {n} thrusts (N)",
    }
    text = args.setpoint or defaults[args.controller]
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if args.controller in ("position", "velocity") and len(values) == 3:
        values.append(0.0)
    if args.controller in ("rotors", "thrusts") and len(values) == 1:
        values = values * n
    sizes = {"position": 4, "velocity": 4, "attitude": 5, "rates": 4, "rotors": n, "thrusts": n}
    if len(values) != sizes[args.controller] or not all(abs(v) <= FLOAT32_MAX for v in values):  # NaN fails too
        raise ConfigError(f"--setpoint {text!r} for --controller {args.controller} must be {forms[args.controller]}")
    return values


def cmd_fly(args) -> int:
    import numpy as np

    from goggles.dynamics import ControlMode, GroundEffect, Integrator, SimulatorSettings, load_airframe
    from goggles.dynamics.model import MAX_PHYSICS_RATE, MIN_PHYSICS_RATE
    from goggles.dynamics.trajectory import TrajectoryWriter, trajectory_row
    from goggles.frames import quat_from_euler
    from goggles.rig import parts

    if not (args.duration > 0 and args.decimate >= 1):
        raise ConfigError("--duration must be > 0 s and --decimate >= 1")
    if not MIN_PHYSICS_RATE <= args.rate <= MAX_PHYSICS_RATE:
        raise ConfigError(
            f"--rate {args.rate:g}: the physics rate must be from {MIN_PHYSICS_RATE:g} Hz to {MAX_PHYSICS_RATE:g} Hz"
        )
    airframe = load_airframe(args.preset)
    setpoint = _setpoint(args, airframe)
    start = [0.0, 0.0, 0.0, 0.0] if args.start is None else list(args.start) + [0.0] * (4 - len(args.start))
    sim = parts.simulator(
        airframe,
        1,
        SimulatorSettings(
            dt=1.0 / args.rate,
            integrator=None if args.integrator is None else Integrator[args.integrator.upper()],
            ground_effect=GroundEffect[args.ground_effect.upper().replace("-", "_")],
            imu_rate=args.imu_rate,
            disturbances=not args.no_disturbances,
            imu_noise=not args.no_imu_noise,
            seed=args.seed,
        ),
        device=args.device,
    )
    airborne = start[2] > 0.0  # above the floor: start hovering, rotors at hover speed
    sim.reset(
        position=start[:3],
        attitude=quat_from_euler(0.0, 0.0, start[3]),
        rotor_speed=airframe.hover_speed if airborne else 0.0,
    )
    sim.set_command(ControlMode[_CONTROLLERS[args.controller]], setpoint)
    rows_total = int(round(args.duration * args.rate / args.decimate))
    last_progress = time.perf_counter()
    with TrajectoryWriter(args.out, airframe.num_rotors) as out:
        rows = [trajectory_row(sim.states())]
        try:
            for _ in range(rows_total):
                sim.step(args.decimate)
                rows.append(trajectory_row(sim.states()))
                if len(rows) == 4096:
                    out.write(np.array(rows))
                    rows.clear()
                if time.perf_counter() - last_progress > 1.0:
                    last_progress = time.perf_counter()
                    report(f"flown {sim.time:.1f} / {args.duration:g} s")
        finally:  # an interrupted flight keeps every row it flew
            if rows:
                out.write(np.array(rows))
        final = trajectory_row(sim.states())
    sim.close()
    print(
        f"{airframe.name}: {args.duration:g} s, {args.controller} control, {sim.integrator.name.lower()} at "
        f"{args.rate:g} Hz; "
        f"final position {final[1]:.3f},{final[2]:.3f},{final[3]:.3f} m, speed {np.linalg.norm(final[4:7]):.3f} m/s "
        f"-> {args.out} ({out.rows} rows)"
    )
    return 0
