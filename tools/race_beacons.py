"""Race the default course from the IMU and the IR beacons alone, over the bus (AlphaPilot style).

The pilot knows what an AlphaPilot team knew: the nominal gate map (the course file), its camera's
intrinsics (read from one depth image message) and mount, and its start pose. In flight it uses only
the IMU (strapdown integration of the gyro and accelerometer) and the beacon detections of its left
camera: whenever a gate's four corners are seen, cv2.solvePnP on them gives the camera's pose relative
to that gate, hence the vehicle's pose in the map; between fixes the IMU carries the estimate. It
flies velocity commands through points before, at and after each gate, looking at the next gate.

Ground truth (``quad0/state``) is read only to write the flight log that ``goggles race`` scores.

    goggles run assets/run-race.toml --mode lockstep &
    python tools/race_beacons.py --lockstep --log flight.csv
    goggles race --log flight.csv
"""

from __future__ import annotations

import argparse
import sys

import cv2
import numpy as np

from goggles.cli.common import floats, positive
from goggles.client import Client
from goggles.dynamics import GRAVITY, ControlMode
from goggles.errors import GogglesError
from goggles.frames import R_BODY_OPTICAL, quat_from_euler, quat_to_matrix
from goggles.paths import default_course, writable_file
from goggles.race import course_waypoints
from goggles.scene.gates import load_course
from goggles.transport.buses import ZmqEndpoints

#: How long to wait for an engine to answer at the publish endpoint (one still starting up answers once
#: it runs).
ENGINE_WAIT_S = 30.0


class Estimator:
    """Strapdown IMU integration, reset by beacon PnP fixes (position, attitude, and velocity)."""

    def __init__(self, p: np.ndarray, yaw: float):
        self.p = np.array(p, dtype=np.float64)
        self.v = np.zeros(3)
        self.R = quat_to_matrix(quat_from_euler(0.0, 0.0, yaw))
        self.last_fix: tuple[float, np.ndarray] | None = None

    def imu(self, accel: np.ndarray, gyro: np.ndarray, dt: float) -> None:
        angle = gyro * dt
        theta = np.linalg.norm(angle)
        if theta > 1e-12:
            self.R = self.R @ cv2.Rodrigues(angle)[0]
        a_W = self.R @ accel - [0.0, 0.0, GRAVITY]
        self.p += self.v * dt + 0.5 * a_W * dt * dt
        self.v += a_W * dt

    def fix(self, t: float, p: np.ndarray, R: np.ndarray) -> None:
        if self.last_fix is not None and t - self.last_fix[0] > 1e-3:
            measured = (p - self.last_fix[1]) / (t - self.last_fix[0])
            self.v = 0.5 * self.v + 0.5 * measured  # blend: PnP differences are noisy, the IMU drifts
        self.p, self.R = p, R
        self.last_fix = (t, p.copy())


def gate_fix(detections, gate, K, distortion, T_BC):
    """Vehicle pose (p_WB, R_WB) from the four corner beacons of ``gate``, or None."""
    seen = {i: (u, v) for i, u, v in detections if i.startswith(gate.name + "/")}
    if len(seen) < 4:
        return None
    object_G = gate.beacon_positions_G()
    image = np.array([seen[f"{gate.name}/{k}"] for k in range(4)], dtype=np.float64)
    ok, rvec, tvec = cv2.solvePnP(object_G, image, K, distortion, flags=cv2.SOLVEPNP_IPPE)
    if not ok:
        return None
    R_CG = cv2.Rodrigues(rvec)[0]
    T_CG = np.eye(4)
    T_CG[:3, :3], T_CG[:3, 3] = R_CG, tvec.ravel()
    T_WB = gate.T_WG @ np.linalg.inv(T_CG) @ np.linalg.inv(T_BC)
    return T_WB[:3, 3], T_WB[:3, :3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--course", default=str(default_course()), help="the nominal gate map")
    parser.add_argument("--vehicle", default="quad0")
    parser.add_argument("--camera", default="stereo_left")
    parser.add_argument(
        "--camera-position",
        type=floats(3, "--camera-position"),
        default=(0.1, 0.16, 0.0),
        help="camera mount in the body, m",
    )
    parser.add_argument("--speed", type=positive, default=2.5, help="cruise speed, m/s")
    parser.add_argument("--lockstep", action="store_true", help="drive the engine's clock (lockstep mode)")
    parser.add_argument("--log", default=None, help="write the ground-truth flight log (t,px,py,pz,crashed) here")
    parser.add_argument("--timeout", type=positive, default=90.0, help="s of sim time")
    parser.add_argument("--publish", default="tcp://127.0.0.1:5555")
    parser.add_argument("--inputs", default="tcp://127.0.0.1:5556")
    parser.add_argument("--control", default="tcp://127.0.0.1:5557")
    args = parser.parse_args()
    try:
        return race(args)
    except (GogglesError, TimeoutError, ConnectionError) as exc:  # a course file, an endpoint, no engine: one line
        parser.error(str(exc))


def readings(client, reply, state_channel: str, depth_channel: str):
    """Lockstep: the messages up to the state at the instant ``reply`` reached, in the engine's order
    from one stream (IMU samples and beacon detections as they were measured: each fix lands between
    the right samples), then that state, and the newest depth image among them. A run reads the same
    messages at the same steps every time (``Client.receive_until``). No state within 5 s: None for it."""
    before, state = client.receive_until(state_channel, reply.header.utime)
    events, depth = [], None
    for channel, message in before:
        if channel == depth_channel:
            depth = message
        elif channel != state_channel:
            events.append((channel, message))
    return events, state, depth


def race(args) -> int:
    if args.log:
        writable_file(args.log, "--log")
    course = load_course(args.course)
    waypoints = course_waypoints(course)[:-1]  # the race ends at the last gate: no exit point needed
    T_BC = np.eye(4)
    T_BC[:3, :3] = R_BODY_OPTICAL
    T_BC[:3, 3] = args.camera_position
    v, cam = args.vehicle, args.camera
    imu_channel, state_channel = f"{v}/imu", f"{v}/state"
    beacons_channel, depth_channel = f"{v}/{cam}/beacons", f"{v}/{cam}/depth"
    with Client(ZmqEndpoints(args.publish, args.inputs, args.control)) as client:
        depth, events = None, []
        if args.lockstep:  # one stream, in the engine's order (see readings)
            client.subscribe(imu_channel, beacons_channel, depth_channel, state_channel)
            client.wait_for_subscriptions(ENGINE_WAIT_S)  # from here on nothing published is lost
            for _ in range(100):  # until the first depth image (it gives the intrinsics) has come through
                more, _, depth = readings(client, client.step(32), state_channel, depth_channel)
                events += more
                if depth is not None:
                    break
        else:
            client.subscribe(imu_channel)
            client.wait_for_subscriptions(ENGINE_WAIT_S)
            for channel in (beacons_channel, state_channel):
                client.latest(channel, timeout=0.0)  # open the subscriptions
            for _ in range(100):
                depth = client.latest(depth_channel, timeout=0.5)
                if depth is not None:
                    break
        if depth is None:
            print("no camera image from the engine", file=sys.stderr)
            return 1
        K = np.array([[depth.fx, 0, depth.cx], [0, depth.fy, depth.cy], [0, 0, 1]])
        distortion = np.array(depth.distortion)
        estimate = Estimator(course.start[:3], course.start[3])
        log, index, last_imu, last_beacons, crashed = [], 0, None, -1, False
        t = 0.0
        while index < len(waypoints) and t < args.timeout and not crashed:
            # IMU samples in order (strapdown) and beacon detections (PnP fixes): in lockstep each as it
            # came; running free, the samples that have arrived, then the newest detections.
            if not args.lockstep:
                while (item := client.receive(timeout=0.005)) is not None:
                    events.append(item)
                beacons = client.latest(beacons_channel, timeout=0.0)
                if beacons is not None:
                    events.append((beacons_channel, beacons))
            gate = course.gates[min(index // 3, len(course.gates) - 1)]
            # In the order they were measured: an IMU FIFO delivers its samples after the frame of their time.
            events.sort(key=lambda item: (item[1].header.utime, item[0] != imu_channel))
            for channel, message in events:
                if channel == imu_channel:
                    if last_imu is not None:
                        estimate.imu(
                            np.array(message.linear_acceleration),
                            np.array(message.angular_velocity),
                            (message.header.utime - last_imu) * 1e-6,
                        )
                    last_imu = message.header.utime
                elif message.header.utime != last_beacons:
                    last_beacons = message.header.utime
                    fix = gate_fix(zip(message.ids, message.u, message.v), gate, K, distortion, T_BC)
                    if fix is not None:
                        estimate.fix(message.header.utime * 1e-6, *fix)
            events = []
            target = waypoints[index][:3]
            error = target - estimate.p
            if np.linalg.norm(error) < 0.35:
                index += 1
                continue
            velocity = error / np.linalg.norm(error) * min(args.speed, 1.5 * np.linalg.norm(error) + 0.5)
            now = (last_imu or 0) * 1e-6
            if estimate.last_fix is not None and now - estimate.last_fix[0] > 3.0:
                velocity = np.zeros(3)  # blind too long: hover rather than trust drifting dead reckoning
            look = gate.T_WG[:3, 3] - estimate.p
            yaw = float(np.arctan2(look[1], look[0])) if index % 3 == 0 else gate.yaw
            client.send_command(v, ControlMode.VELOCITY, [*velocity, yaw])
            if args.lockstep:  # 60 Hz control
                events, state, _ = readings(client, client.step(16), state_channel, depth_channel)
                if state is None:
                    raise TimeoutError(f"no {state_channel} from the engine within 5 s of a lockstep step")
            else:
                state = client.latest(state_channel, timeout=0.0)
            if state is not None:
                t = state.header.utime * 1e-6
                crashed = bool(state.crashed)
                log.append([t, *state.position, float(crashed)])
        client.send_command(v, ControlMode.VELOCITY, [0.0, 0.0, 0.0, 0.0])
    if args.log:
        np.savetxt(args.log, np.array(log), delimiter=",", header="t,px,py,pz,crashed", comments="", fmt="%.6f")
    outcome = "crashed" if crashed else ("all gates flown" if index >= len(waypoints) else "timed out")
    print(
        f"{outcome} at t={t:.2f} s ({(index + 1) // 3} of {len(course.gates)} gates reached by its estimate); estimate "
        f"{np.round(estimate.p, 2).tolist()}, yaw {np.degrees(np.arctan2(estimate.R[1, 0], estimate.R[0, 0])):.0f} deg"
    )
    return 0 if index >= len(waypoints) else 1


if __name__ == "__main__":
    sys.exit(main())
