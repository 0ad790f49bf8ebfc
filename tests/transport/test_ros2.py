"""ROS 2 over DDS with real parts: the bytes goggles writes are rosbags' CDR of the same messages, and a
separate process with its own Cyclone DDS participant (``tests/ros2_peer.py``, no goggles code) receives
the topics with their types and QoS, and moves and flies vehicles with PoseStamped and Twist."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import goggles_lcm

pytest.importorskip("cyclonedds")
rosbags = pytest.importorskip("rosbags.typesys")

from goggles.client import Client  # noqa: E402
from goggles.logs.record import read_log  # noqa: E402
from goggles.transport.ros2 import Ros2Settings, cdr  # noqa: E402
from goggles.transport.ros2 import types as T  # noqa: E402
from tests.support import Running, arena_run_file, goggles_result, run_config  # noqa: E402

PEER = Path(__file__).with_name("ros2_peer.py")
MSG = Path(__file__).resolve().parents[2] / "goggles" / "transport" / "ros2" / "msg" / "goggles_msgs"


DVS_MSGS = {
    "Event": "uint16 x\nuint16 y\nbuiltin_interfaces/Time ts\nbool polarity\n",
    "EventArray": "std_msgs/Header header\nuint32 height\nuint32 width\ndvs_msgs/Event[] events\n",
}


@pytest.fixture(scope="module")
def typestore():
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    stores = {}
    for distro, store in (("humble", Stores.ROS2_HUMBLE), ("jazzy", Stores.ROS2_JAZZY)):
        ts = get_typestore(store)
        for name in ("Beacons", "RatesThrust"):
            ts.register(get_types_from_msg((MSG / f"{name}.msg").read_text(), f"goggles_msgs/msg/{name}"))
        for name in ("Event", "EventArray"):  # rpg_dvs_ros' definitions, written out here
            ts.register(get_types_from_msg(DVS_MSGS[name], f"dvs_msgs/msg/{name}"))
        stores[distro] = ts
    return stores


def ros(ts, type_name, **fields):
    return ts.types[type_name](**fields)


def header(ts, utime, frame):
    stamp = ros(ts, "builtin_interfaces/msg/Time", sec=utime // 1_000_000, nanosec=(utime % 1_000_000) * 1000)
    return ros(ts, "std_msgs/msg/Header", stamp=stamp, frame_id=frame)


def vec(ts, x, y, z):
    return ros(ts, "geometry_msgs/msg/Vector3", x=x, y=y, z=z)


def quat(ts, w, x, y, z):
    return ros(ts, "geometry_msgs/msg/Quaternion", x=x, y=y, z=z, w=w)


def assert_same(ts, ours: bytes, message, name: str):
    theirs = ts.serialize_cdr(message, name).tobytes()
    assert ours == theirs, f"{name}: goggles wrote {ours[:48].hex()}..., rosbags {theirs[:48].hex()}..."


def test_every_message_is_byte_for_byte_rosbags_cdr(typestore):
    ts = typestore["humble"]
    utime = 12_345_678_901
    depth = np.arange(12, dtype=np.float32).reshape(3, 4)
    rgb = np.arange(3 * 5 * 3, dtype=np.uint8)  # width 5 rgb8: rows of 15 bytes (no 4-byte alignment)
    for encoding, width, step, data in (("32FC1", 4, 16, depth.tobytes()), ("rgb8", 5, 15, rgb.tobytes())):
        message = ros(
            ts,
            "sensor_msgs/msg/Image",
            header=header(ts, utime, "quad0/stereo_left_optical_frame"),
            height=3,
            width=width,
            encoding=encoding,
            is_bigendian=0,
            step=step,
            data=np.frombuffer(data, np.uint8),
        )
        ours = cdr.image(utime, "quad0/stereo_left_optical_frame", width, 3, encoding, step, data)
        assert_same(ts, ours, message, "sensor_msgs/msg/Image")

    fx, fy, cx, cy, baseline = 160.0, 161.0, 79.5, 59.5, 0.32
    distortion = [-0.28, 0.07, 0.001, -0.0015, 0.0]
    info = ros(
        ts,
        "sensor_msgs/msg/CameraInfo",
        header=header(ts, utime, "quad0/stereo_right_optical_frame"),
        height=120,
        width=160,
        distortion_model="plumb_bob",
        d=np.array(distortion),
        k=np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1.0]),
        r=np.eye(3).ravel(),
        p=np.array([fx, 0, cx, -fx * baseline, 0, fy, cy, 0, 0, 0, 1, 0]),
        binning_x=0,
        binning_y=0,
        roi=ros(ts, "sensor_msgs/msg/RegionOfInterest", x_offset=0, y_offset=0, height=0, width=0, do_rectify=False),
    )
    frame = "quad0/stereo_right_optical_frame"
    ours = cdr.camera_info(utime, frame, 160, 120, fx, fy, cx, cy, distortion, -fx * baseline)
    assert_same(ts, ours, info, "sensor_msgs/msg/CameraInfo")

    covariance = np.zeros(9)
    imu = ros(
        ts,
        "sensor_msgs/msg/Imu",
        header=header(ts, utime, "quad0/base_link"),
        orientation=quat(ts, 1.0, 0, 0, 0),
        orientation_covariance=np.r_[-1.0, np.zeros(8)],
        angular_velocity=vec(ts, 0.1, -0.2, 0.3),
        angular_velocity_covariance=covariance,
        linear_acceleration=vec(ts, 0.5, 0.25, 9.81),
        linear_acceleration_covariance=covariance,
    )
    assert_same(ts, cdr.imu(utime, "quad0/base_link", [0.1, -0.2, 0.3], [0.5, 0.25, 9.81]), imu, "sensor_msgs/msg/Imu")

    q = np.array([0.9, 0.1, -0.2, 0.3])
    q /= np.linalg.norm(q)
    pose = ros(
        ts,
        "geometry_msgs/msg/Pose",
        position=ros(ts, "geometry_msgs/msg/Point", x=1.0, y=2.0, z=3.0),
        orientation=quat(ts, *q),
    )
    twist = ros(ts, "geometry_msgs/msg/Twist", linear=vec(ts, 0.4, 0.5, 0.6), angular=vec(ts, 0.01, 0.02, 0.03))
    odometry = ros(
        ts,
        "nav_msgs/msg/Odometry",
        header=header(ts, utime, "map"),
        child_frame_id="quad0/base_link",
        pose=ros(ts, "geometry_msgs/msg/PoseWithCovariance", pose=pose, covariance=np.zeros(36)),
        twist=ros(ts, "geometry_msgs/msg/TwistWithCovariance", twist=twist, covariance=np.zeros(36)),
    )
    ours = cdr.odometry(utime, "map", "quad0/base_link", [1, 2, 3], q, [0.4, 0.5, 0.6], [0.01, 0.02, 0.03])
    assert_same(ts, ours, odometry, "nav_msgs/msg/Odometry")

    for distro, variance in (("humble", None), ("jazzy", 0.0004)):
        store = typestore[distro]
        fields = {"variance": variance} if variance is not None else {}
        message = ros(
            store,
            "sensor_msgs/msg/Range",
            header=header(store, utime, "quad0/altimeter"),
            radiation_type=1,
            field_of_view=0.47,
            min_range=0.04,
            max_range=4.0,
            range=float("inf"),
            **fields,
        )
        ours = cdr.range_(utime, "quad0/altimeter", 0.47, 0.04, 4.0, float("inf"), variance=variance)
        assert_same(store, ours, message, "sensor_msgs/msg/Range")

    transforms = [
        (utime, "map", "quad0/base_link", [1, 2, 3], q),
        (0, "quad0/base_link", "quad0/cam", [0.1, 0, 0], [1, 0, 0, 0]),
    ]
    tf = ros(
        ts,
        "tf2_msgs/msg/TFMessage",
        transforms=[
            ros(
                ts,
                "geometry_msgs/msg/TransformStamped",
                header=header(ts, u, parent),
                child_frame_id=child,
                transform=ros(ts, "geometry_msgs/msg/Transform", translation=vec(ts, *t), rotation=quat(ts, *r)),
            )
            for u, parent, child, t, r in transforms
        ],
    )
    assert_same(ts, cdr.tf_message(transforms), tf, "tf2_msgs/msg/TFMessage")
    clock = ros(ts, "rosgraph_msgs/msg/Clock", clock=header(ts, utime, "").stamp)
    assert_same(ts, cdr.clock(utime), clock, "rosgraph_msgs/msg/Clock")
    beacons = ros(
        ts,
        "goggles_msgs/msg/Beacons",
        header=header(ts, utime, "quad0/stereo_left_optical_frame"),
        ids=["Gate1/1", "Gate1/2"],
        u=np.array([10.5, 20.25]),
        v=np.array([30.0, 40.0]),
        range=np.array([5.0, 6.0]),
    )
    frame = "quad0/stereo_left_optical_frame"
    ours = cdr.beacons(utime, frame, ["Gate1/1", "Gate1/2"], [10.5, 20.25], [30, 40], [5, 6])
    assert_same(ts, ours, beacons, "goggles_msgs/msg/Beacons")

    # An event camera's packet, for 0, 1, 2 and many events (CDR pads events after the first to 16 bytes).
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7):
        times = np.sort(rng.integers(utime * 1000, utime * 1000 + 10_000_000, n))
        events = {"x": rng.integers(0, 346, n), "y": rng.integers(0, 260, n), "t": times}
        events["polarity"] = rng.choice([-1, 1], n)
        array = ros(
            ts,
            "dvs_msgs/msg/EventArray",
            header=header(ts, utime, "quad0/dvs_optical_frame"),
            height=260,
            width=346,
            events=[
                ts.types["dvs_msgs/msg/Event"](
                    x=int(x),
                    y=int(y),
                    ts=ros(ts, "builtin_interfaces/msg/Time", sec=int(t // 10**9), nanosec=int(t % 10**9)),
                    polarity=bool(p > 0),
                )
                for x, y, t, p in zip(events["x"], events["y"], events["t"], events["polarity"])
            ],
        )
        ours = cdr.event_array(utime, "quad0/dvs_optical_frame", 346, 260, events)
        assert_same(ts, ours, array, "dvs_msgs/msg/EventArray")

    # A fisheye's CameraInfo: ROS's equidistant model, its four coefficients.
    k = [-0.0066, 0.0439, -0.0415, 0.0077]
    info = ros(
        ts,
        "sensor_msgs/msg/CameraInfo",
        header=header(ts, utime, "quad0/fisheye_left_optical_frame"),
        height=800,
        width=848,
        distortion_model="equidistant",
        d=np.array(k),
        k=np.array([285.7, 0, 419.0, 0, 285.9, 405.3, 0, 0, 1.0]),
        r=np.eye(3).ravel(),
        p=np.array([285.7, 0, 419.0, 0, 0, 285.9, 405.3, 0, 0, 0, 1, 0]),
        binning_x=0,
        binning_y=0,
        roi=ros(ts, "sensor_msgs/msg/RegionOfInterest", x_offset=0, y_offset=0, height=0, width=0, do_rectify=False),
    )
    frame = "quad0/fisheye_left_optical_frame"
    ours = cdr.camera_info(utime, frame, 848, 800, 285.7, 285.9, 419.0, 405.3, k, 0.0, "equidistant")
    assert_same(ts, ours, info, "sensor_msgs/msg/CameraInfo")


def test_inputs_decode_what_rosbags_writes(typestore):
    """The DDS types goggles reads inputs with agree with the ROS 2 definitions."""
    ts = typestore["humble"]
    q = quat(ts, 0.5, 0.5, 0.5, 0.5)
    pose = ros(
        ts,
        "geometry_msgs/msg/PoseStamped",
        header=header(ts, 1_500_000, "map"),
        pose=ros(
            ts, "geometry_msgs/msg/Pose", position=ros(ts, "geometry_msgs/msg/Point", x=1, y=2, z=3), orientation=q
        ),
    )
    decoded = T.PoseStamped.deserialize(ts.serialize_cdr(pose, "geometry_msgs/msg/PoseStamped").tobytes())
    assert decoded.header.stamp.sec == 1 and decoded.header.stamp.nanosec == 500_000_000
    assert (decoded.pose.position.z, decoded.pose.orientation.w) == (3.0, 0.5)
    twist = ros(ts, "geometry_msgs/msg/Twist", linear=vec(ts, 1, 2, 3), angular=vec(ts, 0, 0, 0.5))
    decoded = T.Twist.deserialize(ts.serialize_cdr(twist, "geometry_msgs/msg/Twist").tobytes())
    assert (decoded.linear.z, decoded.angular.z) == (3.0, 0.5)
    rates = ros(
        ts, "goggles_msgs/msg/RatesThrust", header=header(ts, 0, ""), thrust=9.0, body_rates=vec(ts, 0.1, 0.2, 0.3)
    )
    decoded = T.RatesThrust.deserialize(ts.serialize_cdr(rates, "goggles_msgs/msg/RatesThrust").tobytes())
    assert (decoded.thrust, decoded.body_rates.y) == (9.0, 0.2)


# ---------------------------------------------------------------------- a separate DDS process


def domain() -> int:
    """A DDS domain of its own, so concurrent runs on this machine do not hear each other."""
    return random.randint(20, 220)


def peer(*args) -> subprocess.Popen:
    """The peer in its own process, with Cyclone DDS configured as a ROS 2 node on this machine would be
    to see goggles (``CYCLONEDDS_URI``, as the README says)."""
    import os

    from goggles.transport.ros2 import LOCALHOST_ONLY_CONFIG

    process = subprocess.Popen(
        [sys.executable, str(PEER), *map(str, args)],
        env={**os.environ, "CYCLONEDDS_URI": LOCALHOST_ONLY_CONFIG},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready", process.stderr.read()
    return process


def with_ros2(config, domain_id: int):
    return dataclasses.replace(config, ros2=Ros2Settings(domain_id=domain_id))


@pytest.mark.slow
def test_a_ros2_peer_receives_every_topic_with_its_type_and_qos():
    domain_id = domain()
    config = with_ros2(run_config(mode="sim", scale=1.0, route=False), domain_id)
    listener = peer("listen", domain_id, 8)
    running = Running(config, duration=3.0)
    client = Client(config.zmq)
    client.subscribe("quad0/stereo_left/depth")
    zmq_images = {}
    deadline = time.monotonic() + 60
    while running.thread.is_alive() and time.monotonic() < deadline:
        item = client.receive(timeout=0.2)
        if item is not None:
            zmq_images[item[1].header.utime] = item[1].data
    running.finish()
    client.close()
    out, err = listener.communicate(timeout=60)
    samples = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    samples = [s for s in samples if s["type"] != "InvalidSample"]  # the engine's writers going away
    by_topic = {}
    for s in samples:
        by_topic.setdefault(s["topic"], []).append(s)
    expected = {
        "/goggles/quad0/stereo/left/image_depth": ("sensor_msgs::msg::dds_::Image_", "BestEffort"),
        "/goggles/quad0/stereo/left/camera_info": ("sensor_msgs::msg::dds_::CameraInfo_", "BestEffort"),
        "/goggles/quad0/stereo/right/camera_info": ("sensor_msgs::msg::dds_::CameraInfo_", "BestEffort"),
        "/goggles/quad0/imu": ("sensor_msgs::msg::dds_::Imu_", "BestEffort"),
        "/goggles/quad0/odom": ("nav_msgs::msg::dds_::Odometry_", "BestEffort"),
        "/tf": ("tf2_msgs::msg::dds_::TFMessage_", "Reliable"),
        "/tf_static": ("tf2_msgs::msg::dds_::TFMessage_", "Reliable"),
        "/clock": ("rosgraph_msgs::msg::dds_::Clock_", "BestEffort"),
    }
    for topic, (type_name, reliability) in expected.items():
        assert topic in by_topic, f"nothing on {topic}; got {sorted(by_topic)}; {err[-500:]}"
        first = by_topic[topic][0]
        assert first["type_name"] == type_name and first["reliability"].endswith(reliability), first
    assert by_topic["/tf_static"][0]["durability"].endswith("TransientLocal")
    static = {tuple(f) for f in by_topic["/tf_static"][0]["frames"]}
    assert ("quad0/base_link", "quad0/stereo_left_optical_frame") in static
    assert ("quad0/base_link", "quad0/stereo_right_optical_frame") in static
    assert ["map", "quad0/base_link"] in by_topic["/tf"][0]["frames"]
    right = by_topic["/goggles/quad0/stereo/right/camera_info"][0]
    fx = right["p"][0]
    assert right["model"] == "plumb_bob" and right["p"][3] == pytest.approx(-fx * 0.32)
    assert by_topic["/goggles/quad0/stereo/left/camera_info"][0]["p"][3] == 0.0
    # The pixels: the same bytes as the engine published on ZeroMQ for the same frame.
    import hashlib

    matched = 0
    for image in by_topic["/goggles/quad0/stereo/left/image_depth"]:
        assert image["encoding"] == "32FC1" and image["frame"] == "quad0/stereo_left_optical_frame"
        if image["utime"] in zmq_images:
            assert image["sha"] == hashlib.sha256(zmq_images[image["utime"]]).hexdigest()
            matched += 1
    assert matched >= 10
    imu = by_topic["/goggles/quad0/imu"]
    assert len(imu) > 100 and 5.0 < imu[-1]["accel_z"] < 15.0  # resting on the floor: +g up


def live_config(domain_id: int):
    data_config = run_config(mode="live", route=False)
    return with_ros2(data_config, domain_id)


def wait_for(condition, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_a_pose_stamped_from_ros2_moves_a_live_vehicle():
    domain_id = domain()
    running = Running(live_config(domain_id), duration=None)
    publisher = peer("pose", domain_id, "quad0", 1.5, -2.0, 3.0)
    try:
        vehicle = running.engine.vehicles["quad0"]
        assert wait_for(lambda: np.allclose(vehicle.pose()[:3, 3], [1.5, -2.0, 3.0], atol=1e-9))
    finally:
        publisher.communicate(input="", timeout=30)
        running.stop.set()
        running.finish()


@pytest.mark.slow
def test_nan_poses_from_ros2_are_counted_and_dropped():
    domain_id = domain()
    running = Running(live_config(domain_id), duration=None)
    publisher = peer("pose", domain_id, "quad0", "nan", 0.0, 1.0)
    try:
        assert wait_for(lambda: running.engine.counters.malformed >= 3)
        assert np.all(np.isfinite(running.engine.vehicles["quad0"].pose()))
    finally:
        publisher.communicate(input="", timeout=30)
        running.stop.set()
        running.finish()


@pytest.mark.slow
def test_a_twist_from_ros2_flies_a_sim_vehicle():
    domain_id = domain()
    config = with_ros2(run_config(mode="sim", scale=1.0, route=False), domain_id)
    running = Running(config, duration=None)
    publisher = peer("twist", domain_id, "quad0", 1.0)
    try:
        sim = running.engine.vehicles["quad0"].sim
        assert wait_for(lambda: sim.states().position[0, 2] > 1.0, timeout=60)
        assert abs(sim.states().position[0, 0]) < 0.5  # straight up: the Twist's x and y were 0
    finally:
        publisher.communicate(input="", timeout=30)
        running.stop.set()
        running.finish()


@pytest.mark.slow
def test_a_twist_with_a_nan_yaw_rate_is_dropped_and_the_next_one_flies():
    """The yaw rate of a Twist is integrated into the velocity mode's yaw target: a NaN one is
    counted and dropped before it enters the sum, so the Twists after it still fly the vehicle."""
    domain_id = domain()
    config = with_ros2(run_config(mode="sim", scale=1.0, route=False), domain_id)
    running = Running(config, duration=None)
    try:
        bad = peer("twist", domain_id, "quad0", 1.0, "nan")
        assert wait_for(lambda: running.engine.counters.malformed >= 3)
        bad.communicate(input="", timeout=30)
        sim = running.engine.vehicles["quad0"].sim
        assert sim.states().position[0, 2] < 0.5  # nothing flew it
        good = peer("twist", domain_id, "quad0", 1.0)
        assert wait_for(lambda: sim.states().position[0, 2] > 1.0, timeout=60)
        good.communicate(input="", timeout=30)
    finally:
        running.stop.set()
        running.finish()


# ---------------------------------------------------------------------- recordings


@pytest.mark.slow
def test_a_ros2_recording_opens_in_rosbags_and_replays_to_the_same_images(tmp_path):
    from rosbags.highlevel import AnyReader

    from goggles.logs.replay import replay_file
    from goggles.transport.schema import decode_any

    recording = tmp_path / "flight.mcap"
    result = goggles_result(
        "run", arena_run_file(tmp_path), "--duration", "1", "--record", recording, "--record-profile", "ros2"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    recorded, imu, tf, static = {}, 0, set(), set()
    with AnyReader([recording]) as reader:  # rosbags, on the single MCAP file
        for connection, _, raw in reader.messages():
            message = reader.deserialize(raw, connection.msgtype)
            if connection.msgtype == "sensor_msgs/msg/Image":
                stamp = message.header.stamp
                recorded[(connection.topic, stamp.sec * 1_000_000 + stamp.nanosec // 1000)] = bytes(message.data)
            elif connection.msgtype == "sensor_msgs/msg/Imu":
                imu += 1
            elif connection.topic in ("/tf", "/tf_static"):
                frames = {(t.header.frame_id, t.child_frame_id) for t in message.transforms}
                (tf if connection.topic == "/tf" else static).update(frames)
    assert 230 <= imu <= 250  # 1 s at 240 Hz
    assert ("map", "quad0/base_link") in tf and ("quad0/base_link", "quad0/stereo_left_optical_frame") in static
    topics = {topic for topic, _ in recorded}
    assert topics == {f"/goggles/quad0/stereo/{s}/image_{k}" for s in ("left", "right") for k in ("depth", "color")}

    replayed = tmp_path / "replayed.mcap"
    replay = replay_file(recording, record=replayed)
    assert replay.error is None and replay.poses == 61
    again = {}
    names = {"depth": "image_depth", "rgb": "image_color"}
    for _, channel, data in read_log(replayed):
        if "/stereo_" in channel:
            vehicle, camera, output = channel.split("/")
            message = decode_any(data)
            topic = f"/goggles/{vehicle}/stereo/{camera.split('_')[1]}/{names[output]}"
            again[(topic, message.header.utime)] = message.data
    assert set(again) == set(recorded) and len(recorded) == 4 * 31
    assert all(again[key] == recorded[key] for key in recorded)


@pytest.mark.slow
def test_a_rosbag2_of_mocap_poses_replays_as_the_same_poses_in_goggles_own_recording(tmp_path, typestore):
    """A live flight recorded by ROS 2 tools (rosbags' rosbag2 writer, MCAP storage, as ``ros2 bag record``
    makes): a mocap driver's PoseStamped on ``/vrpn_mocap/quad0/pose``, goggles' own input type. It
    replays to the very images of the same poses in goggles' own recording (it replayed nothing before)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    import goggles_lcm
    from goggles.frames import quat_from_euler
    from goggles.logs.record import Recorder
    from goggles.logs.replay import replay_file
    from goggles.transport import schema

    ts = typestore["humble"]
    poses = []
    for i in range(40):  # 100 Hz along x, turning
        q = quat_from_euler(0.0, 0.0, 0.02 * i)
        poses.append((10_000 * i + 1_000_000, [0.05 * i - 1.0, 0.2, 1.5], q))
    bag = tmp_path / "bag"
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        msgtype = "geometry_msgs/msg/PoseStamped"
        other = writer.add_connection("/vrpn_mocap/quad0/twist", "geometry_msgs/msg/Twist", typestore=ts)
        connection = writer.add_connection("/vrpn_mocap/quad0/pose", msgtype, typestore=ts)
        for utime, p, q in poses:
            point = ros(ts, "geometry_msgs/msg/Point", x=p[0], y=p[1], z=p[2])
            rotation = ros(ts, "geometry_msgs/msg/Quaternion", x=q[1], y=q[2], z=q[3], w=q[0])
            pose = ros(ts, "geometry_msgs/msg/Pose", position=point, orientation=rotation)
            message = ros(ts, msgtype, header=header(ts, utime, "world"), pose=pose)
            writer.write(connection, utime * 1000, ts.serialize_cdr(message, msgtype))
            vector = ros(ts, "geometry_msgs/msg/Vector3", x=1.0, y=0.0, z=0.0)
            twist = ros(ts, "geometry_msgs/msg/Twist", linear=vector, angular=vector)
            writer.write(other, utime * 1000, ts.serialize_cdr(twist, "geometry_msgs/msg/Twist"))
    (recording,) = bag.glob("*.mcap")

    ours = tmp_path / "ours.mcap"  # the same poses, as goggles records a live flight
    recorder = Recorder(ours)
    for utime, p, q in poses:
        message = goggles_lcm.pose_t()
        message.header, message.name, message.position = schema.header(utime, 0), "quad0", p
        message.orientation, message.valid = list(q), True
        recorder.write("pose/quad0", message.encode(), utime * 1000)
    recorder.close()

    def replayed(log, name):
        result = replay_file(log, sensors=arena_run_file(tmp_path), record=tmp_path / name)
        assert result.error is None and result.poses == 40 and result.dropped == 0
        decoded = [(channel, schema.decode_any(data)) for _, channel, data in read_log(tmp_path / name)]
        return {(channel, m.header.utime): m.data for channel, m in decoded if "/stereo_" in channel}

    from_bag, from_ours = replayed(recording, "from_bag.mcap"), replayed(ours, "from_ours.mcap")
    assert len(from_bag) == 4 * 12 and from_bag == from_ours  # 0.4 s of a 30 Hz stereo pair, depth and rgb


def test_ros2_recordings_need_an_mcap_file(tmp_path):

    result = goggles_result(
        "run",
        arena_run_file(tmp_path),
        "--duration",
        "0.1",
        "--record",
        tmp_path / "x.lcmlog",
        "--record-profile",
        "ros2",
    )
    assert result.returncode != 0 and "ROS 2 recording is an MCAP file" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_lidar_point_cloud_is_rosbags_cdr(typestore):
    ts = typestore["humble"]
    rng = np.random.default_rng(0)
    x, y, z = (rng.normal(size=5).astype(np.float32) for _ in range(3))
    intensity, time_s = rng.random(5).astype(np.float32), np.linspace(0, 0.09, 5).astype(np.float32)
    ring = np.array([0, 3, 7, 15, 2], np.uint16)
    ours = cdr.point_cloud(123_456_789, "quad0/lidar", x, y, z, intensity, time_s, ring)
    fields = [
        ros(ts, "sensor_msgs/msg/PointField", name=name, offset=offset, datatype=datatype, count=1)
        for name, offset, datatype in cdr.POINT_FIELDS
    ]
    points = np.zeros(5, cdr.POINT_DTYPE)
    for name, values in zip(("x", "y", "z", "intensity", "time", "ring"), (x, y, z, intensity, time_s, ring)):
        points[name] = values
    cloud = ros(
        ts,
        "sensor_msgs/msg/PointCloud2",
        header=header(ts, 123_456_789, "quad0/lidar"),
        height=1,
        width=5,
        fields=fields,
        is_bigendian=False,
        point_step=24,
        row_step=120,
        data=np.frombuffer(points.tobytes(), np.uint8),
        is_dense=True,
    )
    assert_same(ts, ours, cloud, "sensor_msgs/msg/PointCloud2")
    # And what a ROS 2 reader makes of it: the points back, field by field.
    decoded = ts.deserialize_cdr(ours, "sensor_msgs/msg/PointCloud2")
    back = np.frombuffer(bytes(decoded.data), cdr.POINT_DTYPE)
    assert np.array_equal(back["x"], x) and np.array_equal(back["ring"], ring)


def diagnostic_array(ts, utime, level, name, message, hardware, values):
    """rosbags' own diagnostic_msgs/DiagnosticArray of one status."""
    status = ros(
        ts,
        "diagnostic_msgs/msg/DiagnosticStatus",
        level=level,
        name=name,
        message=message,
        hardware_id=hardware,
        values=[ros(ts, "diagnostic_msgs/msg/KeyValue", key=k, value=v) for k, v in values],
    )
    return ros(ts, "diagnostic_msgs/msg/DiagnosticArray", header=header(ts, utime, ""), status=[status])


def test_a_firmwares_status_is_a_diagnostic_array_as_rosbags_writes_it(typestore):
    """<vehicle>/fc (fc_status_t) on ROS 2: diagnostic_msgs/DiagnosticArray, one status, ERROR in failsafe."""
    import goggles_lcm
    from goggles.transport.ros2 import Ros2Settings
    from goggles.transport.ros2.topics import Ros2Topics, fc_diagnostic

    status = goggles_lcm.fc_status_t()
    status.header = goggles_lcm.header_t()
    status.header.utime = 7_500_000
    status.vehicle, status.armed, status.failsafe, status.stopped, status.receiver_silent = (
        "quad0",
        True,
        True,
        False,
        True,
    )
    status.num_flags, status.flags = 1, ["RXLOSS"]
    level, name, said, hardware, values = fc_diagnostic(status)
    assert (level, name, said) == (2, "quad0/fc", "FAILSAFE (receiver silent)")
    for distro in ("humble", "jazzy"):
        ts = typestore[distro]
        expected = diagnostic_array(ts, 7_500_000, level, name, said, hardware, values)
        ours = cdr.diagnostic_array(7_500_000, [fc_diagnostic(status)])
        assert_same(ts, ours, expected, "diagnostic_msgs/msg/DiagnosticArray")
    topics = Ros2Topics(Ros2Settings(namespace="/goggles"), (), (), ())
    (message,) = topics.convert(status)
    assert (message.topic, message.type_name) == ("/goggles/quad0/fc", "diagnostic_msgs/msg/DiagnosticArray")


def test_a_vehicles_status_is_a_diagnostic_array_as_rosbags_writes_it(typestore):
    """<vehicle>/status (vehicle_status_t) on ROS 2: one DiagnosticStatus, WARN while it holds, its
    values holding, command_at and crashed."""
    import goggles_lcm
    from goggles.rig.vehicles import VehicleStatus
    from goggles.transport.messages import vehicle_status_message
    from goggles.transport.ros2 import Ros2Settings
    from goggles.transport.ros2.topics import Ros2Topics

    said = VehicleStatus(True, 1.917, False, "HOLDING (no command since 1.92 s)")
    status = goggles_lcm.vehicle_status_t.decode(vehicle_status_message(2_233_333, 4, "quad0", said).encode())
    values = [("holding", "true"), ("command_at", "1.917"), ("crashed", "false")]
    for distro in ("humble", "jazzy"):
        ts = typestore[distro]
        expected = diagnostic_array(
            ts, 2_233_333, 1, "quad0/status", "HOLDING (no command since 1.92 s)", "goggles", values
        )
        topics = Ros2Topics(Ros2Settings(namespace="/goggles", distro=distro), (), (), ())
        (message,) = topics.convert(status)
        assert (message.topic, message.type_name) == ("/goggles/quad0/status", "diagnostic_msgs/msg/DiagnosticArray")
        assert_same(ts, message.cdr, expected, "diagnostic_msgs/msg/DiagnosticArray")


def test_a_vehicles_wind_is_a_vector3_stamped_as_rosbags_writes_it(typestore):
    """<vehicle>/wind (wind_t) on ROS 2: geometry_msgs/Vector3Stamped in the map frame."""
    from goggles.transport.messages import wind_message
    from goggles.transport.ros2 import Ros2Settings
    from goggles.transport.ros2.topics import Ros2Topics

    wind = goggles_lcm.wind_t.decode(wind_message(3_500_000, 9, "quad0", [5.25, -0.5, 0.125]).encode())
    for distro in ("humble", "jazzy"):
        ts = typestore[distro]
        vector = ros(ts, "geometry_msgs/msg/Vector3", x=5.25, y=-0.5, z=0.125)
        expected = ros(ts, "geometry_msgs/msg/Vector3Stamped", header=header(ts, 3_500_000, "map"), vector=vector)
        topics = Ros2Topics(Ros2Settings(namespace="/goggles", distro=distro), (), (), ())
        (message,) = topics.convert(wind)
        assert (message.topic, message.type_name) == ("/goggles/quad0/wind", "geometry_msgs/msg/Vector3Stamped")
        assert_same(ts, message.cdr, expected, "geometry_msgs/msg/Vector3Stamped")


@pytest.mark.slow
def test_a_twist_with_an_absurd_yaw_rate_leaves_the_next_ones_in_control_of_the_yaw():
    """A finite but absurd yaw rate (1e30 rad/s) integrated into the yaw target must not leave a target
    that later rates cannot move: the vehicle then turns at the rate the next Twists ask for."""
    from goggles.frames import quat_to_matrix

    domain_id = domain()
    config = with_ros2(run_config(mode="sim", scale=1.0, route=False), domain_id)
    running = Running(config, duration=None)
    try:
        sim = running.engine.vehicles["quad0"].sim
        absurd = peer("twist", domain_id, "quad0", 0.5, 1e30)
        assert wait_for(lambda: sim.states().position[0, 2] > 0.3, timeout=60)  # its Twists arrived
        absurd.communicate(input="", timeout=30)
        turning = peer("twist", domain_id, "quad0", 0.0, 2.0)
        turned, last = 0.0, None
        deadline = time.monotonic() + 60
        while turned < 2 * np.pi and time.monotonic() < deadline:  # a full turn, unwrapped
            R = quat_to_matrix(sim.states().attitude[0])
            yaw = float(np.arctan2(R[1, 0], R[0, 0]))
            if last is not None:
                turned += float(np.remainder(yaw - last + np.pi, 2 * np.pi) - np.pi)
            last = yaw
            time.sleep(0.02)
        turning.communicate(input="", timeout=30)
        assert turned >= 2 * np.pi, f"turned {turned:.2f} rad in 60 s at 2 rad/s asked"
    finally:
        running.stop.set()
        running.finish()


def test_a_range_sensors_ros_frame_has_the_beam_along_x_and_a_multizone_one_is_a_cloud(typestore):
    """sensor_msgs/Range: "0 angle corresponds to the x-axis of the sensor". goggles' sensor frame has the
    beam along z, and went to /tf_static as it was: a downward altimeter was drawn looking forward (RViz,
    Foxglove, a costmap's range layer). Now its frame's x is body -z, and a forward sensor's body +x. A
    multizone ToF published nothing; it is an organised PointCloud2 in its frame: looking down from 1.3 m
    at a floor, every zone's point, taken to base_link through /tf_static as a ROS node would, lies on
    that floor, and a zone that measured nothing is NaN."""
    import goggles_lcm
    from goggles.frames import transform
    from goggles.rig.runfile import parse_run_config
    from goggles.transport.ros2.topics import Ros2Topics

    ts = typestore["humble"]
    config = parse_run_config(
        {
            "lcm": {"enabled": False},
            "vehicle": [{"name": "quad0", "route": []}],
            "range_sensor": [
                {"vehicle": "quad0", "name": "altimeter", "preset": "flightgoggles-altimeter"},  # default: down
                {"vehicle": "quad0", "name": "front", "preset": "flightgoggles-altimeter", "rpy_deg": [0, 90, 0]},
                {"vehicle": "quad0", "name": "tof", "preset": "vl53l5cx", "position": [0.05, 0.0, -0.02]},
            ],
        }
    )
    topics = Ros2Topics(Ros2Settings(), range_sensors=config.range_sensors)
    (static,) = topics.static_transforms()
    mounts = {}
    for t in ts.deserialize_cdr(static.cdr, "tf2_msgs/msg/TFMessage").transforms:
        r, p = t.transform.rotation, t.transform.translation
        mounts[t.child_frame_id] = transform([p.x, p.y, p.z], [r.w, r.x, r.y, r.z])
    np.testing.assert_allclose(mounts["quad0/altimeter"][:3, 0], [0, 0, -1], atol=1e-9)  # the beam: down
    np.testing.assert_allclose(mounts["quad0/front"][:3, 0], [1, 0, 0], atol=1e-9)  # the beam: forward

    model = config.range_sensors[2].model
    height = 1.3  # the floor below the sensor, m
    ranges = (height / model.directions()[..., 2]).ravel()
    ranges[5] = float("inf")  # REP 117: nothing within reach
    readings = goggles_lcm.ranges_t()
    readings.header = goggles_lcm.header_t()
    readings.header.utime = 2_000_000
    readings.sensor, readings.min_range, readings.max_range = "quad0/tof", 0.02, 4.0
    readings.num_ranges, readings.ranges = len(ranges), ranges.tolist()
    (cloud,) = topics.convert(readings)
    assert (cloud.topic, cloud.type_name) == ("/goggles/quad0/tof/points", "sensor_msgs/msg/PointCloud2")
    message = ts.deserialize_cdr(cloud.cdr, "sensor_msgs/msg/PointCloud2")
    assert (message.header.frame_id, message.height, message.width, message.is_dense) == ("quad0/tof", 8, 8, False)
    assert [(f.name, f.offset, f.datatype) for f in message.fields] == [("x", 0, 7), ("y", 4, 7), ("z", 8, 7)]
    xyz = np.frombuffer(bytes(message.data), "<f4").reshape(64, 3).astype(np.float64)
    assert np.all(np.isnan(xyz[5])) and np.all(np.isfinite(np.delete(xyz, 5, axis=0)))
    in_body = np.delete(xyz, 5, axis=0) @ mounts["quad0/tof"][:3, :3].T + mounts["quad0/tof"][:3, 3]
    np.testing.assert_allclose(in_body[:, 2], -0.02 - height, atol=1e-5)  # all on the floor
    np.testing.assert_allclose(np.linalg.norm(xyz[np.arange(64) != 5], axis=1), np.delete(ranges, 5), rtol=1e-6)
