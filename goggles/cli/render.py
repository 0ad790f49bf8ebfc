"""goggles render: one frame (mono or stereo) from one pose, written to a folder."""

from __future__ import annotations

from pathlib import Path

from goggles.cli.common import add_backend_arg, add_camera_args, camera_model, floats, positive
from goggles.errors import ConfigError
from goggles.scene.assets import UNITS_M, UP_AXES


def add_parser(commands) -> None:
    render = commands.add_parser(
        "render",
        help="render one frame (mono or stereo) and write its images to a folder",
        description="Render colour, depth, range, segmentation and normals from one pose. "
        "Files: intensity.png (the colour image), depth.png (a preview of the depth), depth.npy, range.npy "
        "(float32 metres, REP 118 invalid values), segmentation.npy (int32 classes), normals.npy (world "
        "frame), face.npy (the triangle hit, -1 none), camera.yaml (the calibration as ROS camera_info "
        "YAML); with --baseline the same files prefixed right_ for the right camera (its projection matrix "
        "carries Tx = -fx * baseline); with --outputs, beacons.json and tof.json. Without --pose a bare mesh "
        "or capture is framed whole, looked at from outside.",
    )
    add_camera_args(render, 640, 480)
    add_backend_arg(render)
    render.add_argument(
        "--pose",
        default=None,
        help="body pose x,y,z,qw,qx,qy,qz in the world (FLU: identity looks along +x, z up); "
        "default: the scene's view, else a view of the whole scene from outside it",
    )
    render.add_argument(
        "--intrinsics", type=floats(4, "--intrinsics"), default=None, help="fx,fy,cx,cy in pixels (overrides --vfov)"
    )
    render.add_argument(
        "--distortion", type=floats(5, "--distortion"), default=(0.0,) * 5, help="OpenCV k1,k2,p1,p2,k3 (default none)"
    )
    render.add_argument("--min-depth", type=float, default=0.0, help="closest valid depth, m (default %(default)s)")
    render.add_argument(
        "--max-depth", type=positive, default=1000.0, help="farthest depth traced, m (default %(default)s)"
    )
    render.add_argument(
        "--baseline", type=positive, default=None, help="stereo baseline, m: adds a right camera at -B along body y"
    )
    render.add_argument("--shading", choices=["sun", "unlit"], default="sun", help="intensity lighting")
    render.add_argument(
        "--noise-model",
        choices=["ideal", "global-shutter", "small-pixel"],
        default=None,
        help="the colour camera's sensor: shot and read noise, ADC steps and vignetting (ideal: none; default: "
        "the --sensor-preset's)",
    )
    render.add_argument(
        "--depth-model",
        choices=["ideal", "d435", "d455"],
        default=None,
        help="how the depth is measured: ideal (exact), or a stereo camera's disparity noise, subpixel steps and "
        "search range (Intel RealSense D435, D455; the baseline is --baseline, else the device's; default: the "
        "--sensor-preset's)",
    )
    render.add_argument(
        "--sensor-preset",
        choices=["ideal", "realistic"],
        default="ideal",
        help="ideal: exact depth, noiseless colour, no shadows; realistic: D435 depth, a global-shutter camera's "
        "noise and the sun's shadows (what the demo run uses)",
    )
    render.add_argument(
        "--outputs",
        default="images",
        help="comma-separated: images (the .npy/.png files), beacons (beacons.json: id, u, v, range, "
        "camera of every IR beacon seen), tof (tof.json: the downward altimeter, REP 117 '+inf'/'-inf' "
        "as strings); default images",
    )
    render.add_argument(
        "--course",
        type=Path,
        default=None,
        help="racing course whose gates and beacons join the scene (default: assets/course.toml "
        "with the default scene, none with --scene)",
    )
    render.add_argument(
        "--up",
        choices=sorted(UP_AXES),
        default=None,
        help="a bare mesh's or capture's up axis (default: the format's own, +z; glTF's +y); captures are "
        "often -y (COLMAP's frame)",
    )
    render.add_argument(
        "--units",
        choices=sorted(UNITS_M),
        default=None,
        help="what one unit of a bare mesh or capture is (default m)",
    )
    render.add_argument("--out", type=Path, required=True, help="folder to write the images to")
    render.set_defaults(run=cmd_render)


def cmd_render(args) -> int:
    import numpy as np

    from goggles.frames import camera_pose_from_body, overview_pose, parse_pose
    from goggles.paths import default_course, default_scene
    from goggles.render import RenderSettings, Shading, stereo_right_offset
    from goggles.render.calibration import write_calibration
    from goggles.render.files import remove_earlier_render, write_camera
    from goggles.rig import parts
    from goggles.scene import load_static_scene
    from goggles.scene.gates import load_course
    from goggles.world import build_world

    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: is a file; give a folder for the images")
    outputs = {o for o in args.outputs.split(",") if o}
    unknown = sorted(outputs - {"images", "beacons", "tof"})
    if not outputs:
        raise ConfigError(f"--outputs {args.outputs!r}: names nothing to render; use images, beacons, tof")
    if unknown:
        raise ConfigError(f"--outputs {args.outputs!r}: unknown {unknown}; use images, beacons, tof")
    camera = camera_model(args)
    scene = load_static_scene(args.scene or default_scene(), units=args.units, up=args.up)
    course_path = args.course or (default_course() if args.scene is None else None)
    course = load_course(course_path) if course_path is not None else None
    built = build_world(scene, course=course, device=args.device)
    world, T_WA = built.scene, built.gate_poses
    if args.pose is not None:
        T_WB = parse_pose(args.pose)
    elif scene.view is not None:
        T_WB = scene.view
    else:  # a bare mesh or capture: look at all of it from outside
        T_WB = overview_pose(*scene.content_bounds(), args.vfov)
    T_WC = [camera_pose_from_body(T_WB)]
    partner = [-1]
    if args.baseline is not None:
        T_WC.append(T_WC[0] @ stereo_right_offset(args.baseline))
        partner = [1, -1]
    names = ["left", "right"][: len(T_WC)]
    written = []
    realistic = args.sensor_preset == "realistic"
    depth_model = args.depth_model or ("d435" if realistic else "ideal")
    noise_model = args.noise_model or ("global-shutter" if realistic else "ideal")
    if "images" in outputs:
        renderer = parts.renderer(
            world,
            [camera] * len(T_WC),
            RenderSettings(
                threads=args.threads, shadows=realistic, shading=Shading[args.shading.upper()], backend=args.backend
            ),
            shadow_partner=partner,
        )
        renderer.render(np.stack(T_WC))
        if depth_model != "ideal":
            from goggles.sensors.stereo_depth import StereoDepth, stereo_depth_model

            n = len(T_WC)
            StereoDepth([stereo_depth_model(depth_model)] * n, renderer, [args.baseline] * n).apply()
        if noise_model != "ideal":
            from goggles.sensors.camera_noise import CameraNoise, camera_noise_model

            CameraNoise([camera_noise_model(noise_model)] * len(T_WC), renderer).apply()
        images = renderer.images()
        renderer.close()
        for i, prefix in enumerate(["", "right_"][: len(T_WC)]):
            written += write_camera(args.out, images, i, prefix)
            written.append(write_calibration(args.out, camera, names[i], prefix, args.baseline if i == 1 else 0.0))
            depth = images.depth[i]
            valid = np.isfinite(depth)
            near_far = f"{depth[valid].min():.2f}..{depth[valid].max():.2f} m" if valid.any() else "none"
            print(
                f"{names[i]} camera: {args.width}x{args.height}, {valid.mean() * 100:.1f}% valid depth "
                f"({near_far}), {np.isnan(depth).mean() * 100:.1f}% stereo-invalid -> {args.out}/{prefix}*"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    if "beacons" in outputs:
        import json

        from goggles.sensors.beacons import BeaconSensor

        beacons = built.beacons
        detections = BeaconSensor(world, beacons, [camera] * len(T_WC)).detect(np.stack(T_WC), T_WA)
        rows = [{"id": d.id, "u": d.u, "v": d.v, "range": d.range, "camera": names[d.camera]} for d in detections]
        (args.out / "beacons.json").write_text(json.dumps(rows, indent=1))
        written.append(args.out / "beacons.json")
        print(
            f"beacons: {len(rows)} detections of {len(beacons)} beacons by {len(T_WC)} camera(s) "
            f"-> {args.out}/beacons.json"
        )
    if "tof" in outputs:
        import json

        from goggles.sensors.ranges import FLIGHTGOGGLES_ALTIMETER, RangeSensor, downward_pose

        model = FLIGHTGOGGLES_ALTIMETER
        reading = RangeSensor(world, model, noise=False).measure(downward_pose(T_WB))[0]
        ranges = [float(r) if np.isfinite(r) else ("+inf" if r > 0 else "-inf") for r in reading.ravel()]
        (args.out / "tof.json").write_text(
            json.dumps(
                {"sensor": model.name, "min_range": model.min_range, "max_range": model.max_range, "ranges": ranges},
                indent=1,
            )
        )
        written.append(args.out / "tof.json")
        print(f"tof: downward {model.name} reads {ranges} m -> {args.out}/tof.json")
    removed = remove_earlier_render(args.out, written)
    if removed:
        names = ", ".join(p.name for p in removed[:4]) + (", ..." if len(removed) > 4 else "")
        print(f"removed {len(removed)} file(s) an earlier render left in {args.out} ({names})")
    return 0
