"""goggles race: fly a course with the built-in pilot, or score a recorded flight."""

from __future__ import annotations

from pathlib import Path

from goggles.cli.common import say_unused, seed


def add_parser(commands) -> None:
    race = commands.add_parser(
        "race",
        help="fly a racing course in the simulator, or score a recorded flight",
        description="Without --log: fly the course with the built-in pilot (position control through the gates, "
        "gates are obstacles). With --log: score a recorded flight (CSV with t, px, py, pz and optionally crashed, "
        "e.g. from 'goggles fly' or 'goggles race --out'). AlphaPilot rule: a gate counts when the vehicle is inside "
        "its corners' box inflated by 0.1 m and within 0.3 m of its plane, in order; score = 10 N - T; a crash or "
        "timeout scores 0. The last line is 'gates=<n> time_s=<t> score=<s> end=<reason>'.",
    )
    race.add_argument("--course", type=Path, default=None, help="course TOML (default: assets/course.toml)")
    race.add_argument("--log", type=Path, default=None, help="score this recorded flight instead of flying")
    race.add_argument(
        "--perturb",
        type=seed,
        default=None,
        metavar="SEED",
        help="shift every gate randomly within its perturbation bounds (seeded)",
    )
    race.add_argument("--scene", type=Path, default=None, help="scene to fly in (default: the built-in arena)")
    race.add_argument("--seed", type=seed, default=None, help="seed of the simulator's noise (default 0)")
    race.add_argument("--out", type=Path, default=None, help="write the flown log as CSV")
    race.add_argument("--device", default=None, help="Warp device")
    race.set_defaults(run=cmd_race)


def cmd_race(args) -> int:
    import numpy as np

    from goggles.paths import default_course
    from goggles.race import fly_course, score_flight
    from goggles.scene.gates import load_course

    course = load_course(args.course or default_course())
    if args.perturb is not None:
        course = course.perturbed(args.perturb)
    if args.log is not None:
        from goggles.race import read_flight_log

        flying = {"--scene": args.scene, "--seed": args.seed, "--out": args.out, "--device": args.device}
        say_unused(flying, ": --log scores a flown log")
        table, header = read_flight_log(args.log)
        crashed = table[:, header.index("crashed")] if "crashed" in header else None
        positions = table[:, [header.index(k) for k in ("px", "py", "pz")]]
        result = score_flight(course, table[:, header.index("t")], positions, crashed)
    else:
        result, log_rows = fly_course(
            course, scene_path=args.scene, device=args.device, seed=0 if args.seed is None else args.seed
        )
        if args.out is not None:
            np.savetxt(args.out, log_rows, delimiter=",", header="t,px,py,pz,crashed", comments="", fmt="%.6f")
    print(
        f"course {course.name}: {len(course.gates)} gates; "
        + ", ".join(f"{g.name} at {t:.2f} s" for g, t in zip(course.gates, result.gate_times))
    )
    print(result.line())
    return 0
