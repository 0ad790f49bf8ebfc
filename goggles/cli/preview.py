"""goggles preview: the stereo pair, a third-person view and WebXR in a browser."""

from __future__ import annotations

import sys
from pathlib import Path

from goggles.cli.common import SilenceHint, floats, port, say_unused, stop_on_signals
from goggles.transport.endpoints import PREVIEW_PORT, ZmqEndpoints


def add_parser(commands) -> None:
    preview = commands.add_parser(
        "preview",
        help="serve a web page with the vehicle's stereo pair, a third-person view, and WebXR for headsets",
        description="Serve http://HOST:PORT/ : the newest stereo colour frames of VEHICLE/CAMERA from a running "
        "engine, side by side, with a third-person view; on a headset browser, 'Enter VR' shows each eye its "
        "image (WebXR). Binds 127.0.0.1 unless --host says otherwise.",
    )
    preview.add_argument(
        "--run",
        dest="run_file",
        type=Path,
        default=None,
        metavar="RUN_FILE",
        help="the run file the engine runs: its ZeroMQ output, its scene, the vehicle's airframe and the camera's "
        "mount (which places the vehicle in the third-person view in live mode too) come from it",
    )
    preview.add_argument(
        "--endpoint",
        default=None,
        help=f"the engine's ZeroMQ output (default: the run file's, or {ZmqEndpoints.publish})",
    )
    preview.add_argument("--keys", type=Path, default=None, help="CURVE client keys for an exposed engine")
    preview.add_argument("--vehicle", default="quad0")
    preview.add_argument("--camera", default="stereo", help="a stereo camera publishing rgb")
    preview.add_argument("--host", default="127.0.0.1", help="address to serve on (0.0.0.0 exposes the page)")
    preview.add_argument("--port", type=port, default=PREVIEW_PORT)
    preview.add_argument(
        "--token",
        default=None,
        help="the stream goes only to pages opened with ?token=TOKEN (default: a random one when --host is not "
        "a loopback address, none on this machine)",
    )
    preview.add_argument(
        "--scene", type=Path, default=None, help="scene of the third-person view (default: the run file's, or arena)"
    )
    preview.add_argument(
        "--viewpoint",
        type=floats(3, "--viewpoint"),
        default=None,
        help="x,y,z of the third-person camera (default: behind and above the vehicle)",
    )
    preview.add_argument(
        "--preset",
        default=None,
        help="airframe preset or TOML path the third-person view draws the vehicle as (default: the run file's, "
        "or fg-quad)",
    )
    preview.add_argument("--no-third-person", action="store_true", help="only the stereo pair")
    preview.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    preview.add_argument("--device", default=None, help="Warp device of the third-person renderer")
    preview.set_defaults(run=cmd_preview)


def cmd_preview(args) -> int:
    import threading

    from goggles.client import Client
    from goggles.errors import ConfigError
    from goggles.paths import default_scene
    from goggles.preview.server import FrameSource, PreviewServer, previewed_camera
    from goggles.rig.runfile import load_run_config
    from goggles.scene import load_static_scene

    if args.no_third_person:
        third_person = {"--scene": args.scene, "--viewpoint": args.viewpoint, "--preset": args.preset}
        say_unused({**third_person, "--device": args.device}, ": --no-third-person draws no third-person view")
    endpoint, scene_path, preset, mount = args.endpoint, args.scene, args.preset, None
    if args.run_file is not None:
        config = load_run_config(args.run_file)
        camera = previewed_camera(config, args.vehicle, args.camera)
        if config.zmq is None and endpoint is None:
            raise ConfigError(f"{config.source}: ZeroMQ is off, and the preview reads the engine's ZeroMQ output")
        endpoint = endpoint or config.zmq.publish
        scene_path = scene_path or config.scene
        preset = preset or next(v.preset for v in config.vehicles if v.name == args.vehicle)
        mount = camera.T_BC
    client = Client(ZmqEndpoints(publish=endpoint or ZmqEndpoints.publish), keys=args.keys)
    scene = None if args.no_third_person else load_static_scene(scene_path or default_scene())
    source = FrameSource(
        client,
        args.vehicle,
        args.camera,
        scene=scene,
        viewpoint=args.viewpoint,
        device=args.device,
        airframe=preset or "fg-quad",
        mount=mount,
    )
    token = args.token
    if token is None and not _loopback(args.host):
        import secrets

        token = secrets.token_urlsafe(16)
    server = PreviewServer(source, host=args.host, port=args.port, token=token)
    stop = stop_on_signals()
    if args.duration is not None:
        threading.Timer(args.duration, stop.set).start()
    page = f"http://{args.host}:{args.port}/" + (f"?token={token}" if token else "")
    silence = SilenceHint(
        f"goggles preview: no {args.vehicle}/{args.camera} images yet from {client.endpoints.publish} after "
        f"{SilenceHint.AFTER_S:g} s: is goggles run running there, and does that stereo camera publish rgb?"
    )
    try:
        server.run(
            stop,
            listening=lambda: print(
                f"goggles preview: {page} (frames from {client.endpoints.publish}, {args.vehicle}/{args.camera}); "
                "Ctrl-C stops",
                file=sys.stderr,
                flush=True,
            ),
            polled=lambda: silence.check(server.frames_sent),
        )
    finally:
        client.close()
    print(f"sent {server.frames_sent} frames")
    return 0


def _loopback(host: str) -> bool:
    """Is ``host`` this machine only?"""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
