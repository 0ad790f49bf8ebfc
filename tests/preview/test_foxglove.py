"""Live viewing: the Foxglove WebSocket server advertises and streams the engine's outputs, and shows
the world as glTF models where the cameras see it."""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
import time

import numpy as np
import pytest

from goggles.dynamics import load_airframe
from goggles.engine import Engine
from goggles.paths import default_course
from goggles.preview.foxglove_sink import FoxgloveSink
from goggles.preview.gltf import mesh_glb
from goggles.scene import load_static_scene
from goggles.scene.actors import PropSpec
from goggles.world.props import REMOVE, SPAWN
from tests.conftest import REPO
from tests.support import free_port, record_run, run_config
from tests.world.test_avatar import skeleton

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]

_COMPONENTS = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
_WIDTHS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4}


def read_glb(data: bytes) -> dict[str, dict]:
    """A GLB file's meshes by node name, read from the glTF 2.0 spec's layout (not by the writer's
    library): 'corners' (n, 3, 3) triangle corners as a Z-up viewer shows them (Foxglove turns glTF's
    Y-up into Z-up by +90 degrees about x), 'rgba' and 'uv' per corner (or None; glTF's uv (0, 0) is
    the image's top-left corner) and 'image' (the encoded texture, or None)."""
    magic, version, _ = struct.unpack_from("<III", data, 0)
    assert magic == 0x46546C67 and version == 2
    length, kind = struct.unpack_from("<II", data, 12)
    assert kind == 0x4E4F534A  # JSON
    gltf = json.loads(data[20 : 20 + length])
    start = 20 + length
    binary = data[start + 8 : start + 8 + struct.unpack_from("<I", data, start)[0]]

    def view(index):
        v = gltf["bufferViews"][index]
        return binary[v.get("byteOffset", 0) : v.get("byteOffset", 0) + v["byteLength"]]

    def accessor(index):
        a = gltf["accessors"][index]
        values = np.frombuffer(view(a["bufferView"]), _COMPONENTS[a["componentType"]], offset=a.get("byteOffset", 0))
        values = values[: a["count"] * _WIDTHS[a["type"]]].reshape(a["count"], _WIDTHS[a["type"]])
        if a.get("normalized"):
            values = values / np.iinfo(values.dtype).max
        return values

    y_up_to_z_up = np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]])  # Foxglove's rotateX(pi / 2)
    meshes = {}
    for node in gltf["nodes"]:
        assert "matrix" not in node and "rotation" not in node and "translation" not in node
        (primitive,) = gltf["meshes"][node["mesh"]]["primitives"]
        attributes = primitive["attributes"]
        triangles = accessor(primitive["indices"]).reshape(-1, 3)
        corners = (accessor(attributes["POSITION"]) @ y_up_to_z_up.T)[triangles]
        rgba = accessor(attributes["COLOR_0"])[triangles] if "COLOR_0" in attributes else None
        uv = accessor(attributes["TEXCOORD_0"])[triangles] if "TEXCOORD_0" in attributes else None
        image = None
        material = gltf["materials"][primitive["material"]] if "material" in primitive else {}
        texture = material.get("pbrMetallicRoughness", {}).get("baseColorTexture")
        if texture is not None:
            source = gltf["images"][gltf["textures"][texture["index"]]["source"]]
            image = bytes(view(source["bufferView"]))
        meshes[node["name"]] = {"corners": corners, "rgba": rgba, "uv": uv, "image": image}
    return meshes


def test_a_textured_mesh_becomes_gltf_that_a_z_up_viewer_shows_where_it_is():
    import cv2

    scene = load_static_scene(REPO / "assets" / "arena" / "pad.obj")
    meshes = read_glb(mesh_glb(scene))
    assert len(meshes) == len(np.unique(scene.face_material))
    for m in np.unique(scene.face_material):
        faces = scene.face_material == m
        mesh = meshes[f"material{m}"]
        np.testing.assert_allclose(mesh["corners"], scene.vertices[scene.faces[faces]], atol=1e-6)
        texture = scene.material_texture[m]
        if texture >= 0:
            decoded = cv2.imdecode(np.frombuffer(mesh["image"], np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
            u, v = scene.corner_uv[faces][..., 0], scene.corner_uv[faces][..., 1]  # (0, 0): bottom-left
            np.testing.assert_allclose(mesh["uv"], np.stack([u, 1.0 - v], axis=-1), atol=1e-6)
            error = np.abs(decoded.astype(float) - scene.textures[texture])  # JPEG: close, not equal
            assert decoded.shape == scene.textures[texture].shape and error.mean() < 3.0
    assert any(scene.material_texture >= 0)


def test_vertex_colours_and_replaced_vertices():
    scene = load_static_scene(REPO / "assets" / "arena" / "crate.ply")
    moved = scene.vertices + np.float32([1.0, 2.0, 3.0])
    (mesh,) = read_glb(mesh_glb(scene, moved)).values()
    np.testing.assert_allclose(mesh["corners"], moved[scene.faces], atol=1e-5)
    expected = scene.corner_rgb * scene.material_rgb[scene.face_material][:, None, :]
    np.testing.assert_allclose(mesh["rgba"][..., :3], expected, atol=1 / 255 + 1e-6)


class _Json:
    @staticmethod
    def FromString(data: bytes) -> dict:  # noqa: N802 (protobuf's name, so both decode alike)
        return json.loads(data)


def _decoder(channel: dict):
    """A protobuf class for a channel's advertised schema (the real protobuf library), or JSON."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    if channel["encoding"] == "json":
        return _Json
    assert channel["encoding"] == "protobuf"
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(channel["schema"]))
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(channel["schemaName"]))


class Viewer:
    """A Foxglove client on the real WebSocket protocol: advertised channels, subscriptions, messages."""

    def __init__(self, socket):
        self.socket, self.channels, self._subscribed = socket, {}, {}

    def wait_for(self, topics: set[str], deadline: float) -> None:
        while not topics <= set(self.channels):
            assert time.monotonic() < deadline, f"never advertised: {topics - set(self.channels)}"
            self._take(self.socket.recv(timeout=5))

    def subscribe(self, topics) -> None:
        subscriptions = []
        for topic in topics:
            sub = len(self._subscribed) + 1
            self._subscribed[sub] = (topic, _decoder(self.channels[topic]))
            subscriptions.append({"id": sub, "channelId": self.channels[topic]["id"]})
        self.socket.send(json.dumps({"op": "subscribe", "subscriptions": subscriptions}))

    def next(self, deadline: float):
        """The next subscribed message as (topic, decoded message)."""
        while True:
            assert time.monotonic() < deadline, "no message came"
            got = self._take(self.socket.recv(timeout=10))
            if got is not None:
                return got

    def _take(self, message):
        if isinstance(message, str):
            payload = json.loads(message)
            if payload.get("op") == "advertise":
                self.channels.update({c["topic"]: c for c in payload["channels"]})
            return None
        if message[0] == 1:  # message data: op, subscription (u32), log time (u64), payload
            (sub,) = struct.unpack_from("<I", message, 1)
            topic, decoder = self._subscribed[sub]
            return topic, decoder.FromString(message[13:])
        return None


@pytest.mark.slow
def test_foxglove_server_streams_images_transforms_and_scene(device):
    from websockets.sync.client import connect

    config = dataclasses.replace(run_config(scale=3.0, route=False), zmq=None, course=default_course())
    sink = FoxgloveSink(port=free_port())
    engine = Engine(config, device=device, sinks=[sink])
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**26) as socket:
            viewer = Viewer(socket)
            engine.run(duration=0.3)  # the channels appear with their first messages
            expected = {
                "/quad0/stereo_left/depth",
                "/quad0/stereo_left/rgb",
                "/quad0/stereo_left/calibration",
                "/tf",
                "/scene",
            }
            viewer.wait_for(expected, time.monotonic() + 10)
            assert viewer.channels["/quad0/stereo_left/depth"]["schemaName"] == "foxglove.RawImage"
            assert viewer.channels["/scene"]["schemaName"] == "foxglove.SceneUpdate"
            viewer.subscribe(["/quad0/stereo_left/depth", "/tf"])
            engine.run(duration=0.6)
            received, deadline = set(), time.monotonic() + 10
            while received != {"/quad0/stereo_left/depth", "/tf"}:
                topic, message = viewer.next(deadline)
                received.add(topic)
                if topic == "/quad0/stereo_left/depth":
                    assert (message.width, message.height, message.encoding) == (48, 32, "32FC1")
    finally:
        engine.close()
        sink.close()


def test_the_server_speaks_the_sdk_subprotocol_and_refuses_the_old_name_alone():
    """What the README tells Lichtblick users: the foxglove-sdk server answers ``foxglove.sdk.v1`` (the
    Foxglove app offers it first) and refuses a client that offers only ``foxglove.websocket.v1``."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    sink = FoxgloveSink(port=free_port())
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS) as socket:
            assert socket.subprotocol == "foxglove.sdk.v1" and '"op":"serverInfo"' in socket.recv(timeout=10)
        with pytest.raises(InvalidStatus, match="HTTP 400"):
            connect(f"ws://127.0.0.1:{sink.port}", subprotocols=["foxglove.websocket.v1"])
    finally:
        sink.close()


def test_a_camera_with_two_images_is_described_once_per_frame():
    """A camera publishing depth and rgb logged its calibration and its /tf frame once per image: twice
    per frame, at one instant. Once now: no two calibrations, nor two of its transforms, share a time."""
    from websockets.sync.client import connect

    config = dataclasses.replace(run_config(scale=3.0, route=False), zmq=None)
    sink = FoxgloveSink(port=free_port())
    engine = Engine(config, device="cpu", sinks=[sink])
    topics = ["/quad0/stereo_left/depth", "/quad0/stereo_left/rgb", "/quad0/stereo_left/calibration", "/tf"]
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**26) as socket:
            viewer = Viewer(socket)
            engine.run(duration=0.2)
            viewer.wait_for(set(topics), time.monotonic() + 10)
            viewer.subscribe(topics)
            engine.run(duration=0.5)
            seen: dict[str, list] = {topic: [] for topic in topics}
            deadline = time.monotonic() + 10
            while len(seen["/quad0/stereo_left/calibration"]) < 8 or len(seen["/quad0/stereo_left/depth"]) < 8:
                topic, message = viewer.next(deadline)
                if topic != "/tf" or message.child_frame_id == "quad0/stereo_left":
                    seen[topic].append((message.timestamp.seconds, message.timestamp.nanos))
    finally:
        engine.close()
        sink.close()
    for topic in ("/quad0/stereo_left/calibration", "/tf"):
        assert len(set(seen[topic])) == len(seen[topic]), (
            f"{topic}: {len(seen[topic])} at {len(set(seen[topic]))} times"
        )


def _entities(update) -> dict:
    return {entity.id: entity for entity in update.entities}


@pytest.mark.slow
def test_foxglove_shows_the_scene_gates_props_and_people_where_the_cameras_see_them(device):
    """The static scene reaches a viewer while it is encoded and one that subscribes after; each gate, prop and
    person is a glTF model whose triangles, placed by the entity's pose and turned Z-up as Foxglove
    turns glTF, are where the renderer's are; a removed prop is deleted from the view."""
    pytest.importorskip("google.protobuf")
    from websockets.sync.client import connect

    crate = PropSpec("crate", 20, box=(0.4, 0.6, 0.8), rgb=(1.0, 0.0, 0.0))
    config = dataclasses.replace(run_config(scale=3.0, route=False), zmq=None, course=default_course(), props=(crate,))
    sink = FoxgloveSink(port=free_port(), scene_interval_s=0.0)  # every clock message updates the actors
    engine = Engine(config, device=device, sinks=[sink])
    static = engine.rig.built.scene.static
    T_crate = np.eye(4)
    T_crate[:3, :3] = [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]  # turned 90 degrees about z
    T_crate[:3, 3] = [2.0, 1.0, 0.4]
    assert engine.rig.props.edit(SPAWN, "crate1", "crate", T_crate) is None
    assert engine.rig.crowd.offer("alice", skeleton(np.pi / 2))
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**27) as socket:
            viewer = Viewer(socket)
            viewer.wait_for({"/scene", "/scene/static"}, time.monotonic() + 10)
            viewer.subscribe(["/scene", "/scene/static"])
            engine.run(duration=0.25)
            updates, deadline = {}, time.monotonic() + 60  # the arena's glTF takes seconds to encode
            while not {"/scene", "/scene/static"} <= set(updates):
                topic, update = viewer.next(deadline)
                updates[topic] = update

            (scenery,) = updates["/scene/static"].entities
            (model,) = scenery.models
            assert model.media_type == "model/gltf-binary"
            meshes = read_glb(model.data)
            for m in np.unique(static.face_material):
                faces = static.faces[static.face_material == m]
                np.testing.assert_allclose(meshes[f"material{m}"]["corners"], static.vertices[faces], atol=1e-5)
            assert sum(len(m["corners"]) for m in meshes.values()) == static.num_faces
            with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**27) as late:
                latecomer = Viewer(late)  # subscribes once the scene went out: it is sent again
                latecomer.wait_for({"/scene/static"}, time.monotonic() + 10)
                latecomer.subscribe(["/scene/static"])
                topic, update = latecomer.next(time.monotonic() + 10)
                assert topic == "/scene/static" and [e.id for e in update.entities] == [scenery.id]
                assert update.entities[0].models[0].data == model.data

            shown = _entities(updates["/scene"])
            gates = [g.name for g in engine.rig.built.course.gates]
            assert set(shown) == {*gates, "crate1", "alice", "quad0"}

            def world_corners(entity) -> np.ndarray:
                (model,) = entity.models
                p, q = model.pose.position, model.pose.orientation
                from scipy.spatial.transform import Rotation

                R = Rotation.from_quat([q.x, q.y, q.z, q.w]).as_matrix()
                local = np.concatenate([m["corners"] for m in read_glb(model.data).values()]).reshape(-1, 3)
                return local @ R.T + [p.x, p.y, p.z]

            def renderer_corners(shape: int, T: np.ndarray) -> np.ndarray:
                mesh = engine.rig.built.scene.shape_mesh(shape)
                points = mesh.points.numpy()[mesh.indices.numpy().reshape(-1, 3)].reshape(-1, 3)
                return points @ T[:3, :3].T + T[:3, 3]

            for i, (name, T) in enumerate(zip(gates, engine.rig.built.gate_poses)):
                np.testing.assert_allclose(
                    np.sort(world_corners(shown[name]), axis=0), np.sort(renderer_corners(i, T), axis=0), atol=1e-4
                )
            box = world_corners(shown["crate1"])  # 0.6 m along world x, 0.4 along y once turned
            np.testing.assert_allclose(box.min(axis=0), [1.7, 0.8, 0.0], atol=1e-5)
            np.testing.assert_allclose(box.max(axis=0), [2.3, 1.2, 0.8], atol=1e-5)
            (crate_mesh,) = read_glb(shown["crate1"].models[0].data).values()
            np.testing.assert_allclose(crate_mesh["rgba"][..., :3], np.broadcast_to([1.0, 0.0, 0.0], (12, 3, 3)))
            person = engine.rig.crowd.avatars["alice"]
            np.testing.assert_allclose(
                np.sort(world_corners(shown["alice"]), axis=0),
                np.sort(renderer_corners(person.shape, np.eye(4)), axis=0),
                atol=1e-5,
            )

            vehicle = shown["quad0"]  # follows the left camera's frame, which every image moves
            assert vehicle.frame_id == "quad0/stereo_left" and vehicle.frame_locked
            (left,) = [c for g in engine.rig.groups for c in g.cameras if c.name == "stereo_left"]
            body = world_corners(vehicle) @ left.T_BC[:3, :3].T + left.T_BC[:3, 3]  # camera frame -> body
            airframe = load_airframe(config.vehicles[0].preset)
            reach = np.abs(airframe.rotor_positions[:, :2]).max(axis=0) + airframe.rotor_radius
            np.testing.assert_allclose(body[:, :2].max(axis=0), reach, atol=1e-4)  # rotor discs at the hubs
            np.testing.assert_allclose(body[:, :2].min(axis=0), -reach, atol=1e-4)
            assert abs(body[:, 2].mean()) < 0.05  # level in the body frame, not on its side
            assert engine.rig.props.edit(REMOVE, "crate1", "", np.eye(4)) is None
            engine.run(duration=0.5)  # until 0.5 s of sim time
            deadline = time.monotonic() + 10
            while True:
                topic, update = viewer.next(deadline)
                if topic == "/scene" and "crate1" not in _entities(update):
                    break
            assert [d.id for d in update.deletions] == ["crate1"]
    finally:
        engine.close()
        sink.close()


@pytest.mark.slow
def test_a_replayed_flight_streams_to_foxglove(tmp_path):
    """``replay_file`` hands its outputs to a Foxglove sink as a run does, the world included."""
    from websockets.sync.client import connect

    from goggles.logs.replay import replay_file

    log = record_run(tmp_path, duration=0.5)
    sink = FoxgloveSink(port=free_port())
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**27) as socket:
            viewer = Viewer(socket)
            viewer.wait_for({"/scene/static"}, time.monotonic() + 10)  # the sink's own channels
            result = replay_file(log, sinks=[sink])
            assert result.error is None
            viewer.wait_for({"/quad0/stereo_left/depth", "/scene"}, time.monotonic() + 10)
            viewer.subscribe(["/scene/static"])
            topic, update = viewer.next(time.monotonic() + 30)
            assert topic == "/scene/static" and update.entities[0].id == "static/mars-arena"
    finally:
        sink.close()


def test_a_vehicle_without_a_camera_follows_its_own_frame_and_an_airframe_not_here_is_drawn_as_fg_quad(caplog):
    from goggles.rig.vehicles import drawn_airframes, viewed_vehicles

    quad = run_config().vehicles[0]
    lost = dataclasses.replace(quad, name="quad1", preset="/nowhere/my-airframe.toml")
    own, fallback = viewed_vehicles([quad, lost], drawn_airframes([quad, lost]), cameras=[])
    assert (own.frame, fallback.frame) == ("quad0", "quad1")
    np.testing.assert_array_equal(own.T_WA, np.eye(4))
    np.testing.assert_array_equal(fallback.mesh.vertices, own.mesh.vertices)  # fg-quad's look
    assert "quad1 is drawn as fg-quad" in caplog.text and "my-airframe.toml" in caplog.text


class Kept:
    """A sink that keeps what the engine publishes (what the Foxglove view must agree with)."""

    def __init__(self):
        self.messages = []

    def write(self, channel, data, log_time_ns):
        self.messages.append((channel, data))


@pytest.mark.slow
def test_foxglove_shows_lidar_scans_beacons_imu_and_ranges_where_they_were_measured():
    """A LiDAR scan is a point cloud placed where the sensor was (the vehicle's state at that step and
    the run file's mount), beacon detections are circles and labels over the image
    at Foxglove's pixel origin (OpenCV's plus half a pixel), and the IMU and the altimeter are JSON a
    plot reads (gravity's +9.81 m/s^2 up at rest; no infinities, which JSON cannot carry)."""
    pytest.importorskip("google.protobuf")
    from websockets.sync.client import connect

    from goggles.rig.runfile import parse_run_config
    from goggles.transport.schema import decode_any

    start = [0.0, 0.0, 0.1, 0.0]
    data = {
        "run": {"mode": "sim", "course": str(default_course()), "seed": 1},
        "clock": {"scale": 3.0},
        "lcm": {"enabled": False},
        "zmq": {"enabled": False},
        "vehicle": [{"name": "quad0", "start": start, "floor_z": 0.1}],
        "camera": [
            {
                "vehicle": "quad0",
                "name": "front",
                "width": 160,
                "height": 120,
                "vfov_deg": 70.0,
                "rate": 30.0,
                "position": [0.1, 0.0, 0.0],
                "outputs": ["depth", "beacons"],
            }
        ],
        "lidar": [
            {
                "vehicle": "quad0",
                "name": "puck",
                "preset": "vlp16",
                "position": [0.05, 0.02, 0.1],
                "rpy_deg": [0.0, 0.0, 30.0],
            }
        ],
        "range_sensor": [{"vehicle": "quad0", "name": "altimeter", "preset": "flightgoggles-altimeter"}],
    }
    config = parse_run_config(data)
    sink, kept = FoxgloveSink(port=free_port(), scene_interval_s=0.0), Kept()
    engine = Engine(config, sinks=[sink, kept])
    topics = ["/quad0/puck/lidar", "/quad0/front/beacons", "/quad0/imu", "/quad0/altimeter/ranges"]
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**27) as socket:
            viewer = Viewer(socket)
            engine.run(duration=0.05)  # every channel has its first message
            viewer.wait_for(set(topics), time.monotonic() + 10)
            assert viewer.channels["/quad0/puck/lidar"]["schemaName"] == "foxglove.PointCloud"
            assert viewer.channels["/quad0/front/beacons"]["schemaName"] == "foxglove.ImageAnnotations"
            imu_channel = viewer.channels["/quad0/imu"]  # JSON with a schema: a plot completes its paths
            assert (imu_channel["encoding"], imu_channel["schemaEncoding"]) == ("json", "jsonschema")
            imu_schema = json.loads(imu_channel["schema"])
            assert imu_schema["properties"]["linear_acceleration"]["properties"]["z"] == {"type": "number"}
            viewer.subscribe(topics)
            kept.messages.clear()
            engine.run(duration=0.25)
            got, deadline = {}, time.monotonic() + 20
            while set(got) != set(topics):
                topic, message = viewer.next(deadline)
                got.setdefault(topic, message)  # the first after subscribing: the first kept below
    finally:
        engine.close()
        sink.close()
    published = {}
    for channel, raw in kept.messages:
        published.setdefault(channel, decode_any(raw))

    cloud, scan = got["/quad0/puck/lidar"], published["quad0/puck/lidar"]
    assert cloud.frame_id == "world" and cloud.point_stride == 16
    assert [f.name for f in cloud.fields] == ["x", "y", "z", "intensity"]
    local = np.frombuffer(cloud.data, np.float32).reshape(-1, 4)
    np.testing.assert_allclose(local[:, :3], np.c_[scan.x, scan.y, scan.z], atol=1e-6)
    from scipy.spatial.transform import Rotation

    p, q = cloud.pose.position, cloud.pose.orientation
    first = next(i for i, (c, _) in enumerate(kept.messages) if c == "quad0/puck/lidar")
    state = [decode_any(d) for c, d in kept.messages[:first] if c == "quad0/state"][-1]  # the same step's
    T_WB = np.eye(4)
    T_WB[:3, :3] = Rotation.from_quat(np.roll(state.orientation, -1)).as_matrix()  # (w, x, y, z) -> (x, y, z, w)
    T_WB[:3, 3] = state.position
    T_BS = np.eye(4)  # the run file's mount
    T_BS[:3, :3] = Rotation.from_euler("z", 30.0, degrees=True).as_matrix()
    T_BS[:3, 3] = [0.05, 0.02, 0.1]
    T_WS = T_WB @ T_BS
    np.testing.assert_allclose(T_WS[:3, 3], np.add(start[:3], [0.05, 0.02, 0.1]), atol=2e-3)  # resting
    np.testing.assert_allclose([p.x, p.y, p.z], T_WS[:3, 3], atol=1e-6)
    np.testing.assert_allclose(Rotation.from_quat([q.x, q.y, q.z, q.w]).as_matrix(), T_WS[:3, :3], atol=1e-6)

    marks, detections = got["/quad0/front/beacons"], published["quad0/front/beacons"]
    assert detections.num_beacons > 0
    np.testing.assert_allclose(
        [(c.position.x, c.position.y) for c in marks.circles], np.c_[detections.u, detections.v] + 0.5, atol=1e-9
    )
    assert [t.text for t in marks.texts] == list(detections.ids)

    imu = got["/quad0/imu"]
    assert abs(imu["linear_acceleration"]["z"] - 9.81) < 0.5 and abs(imu["angular_velocity"]["x"]) < 0.5
    ranges, altimeter = got["/quad0/altimeter/ranges"], published["quad0/altimeter/ranges"]
    expected = [r if np.isfinite(r) else None for r in altimeter.ranges]
    assert ranges["ranges"] == pytest.approx(expected) and ranges["max_range"] == pytest.approx(altimeter.max_range)


def test_a_multizone_tof_shows_its_readings_where_its_beams_met_the_world():
    """A VL53L5CX looking forward and down: its valid zones become points placed at the sensor's pose,
    each as far from the sensor as its reading, in the reading's order, and Embree (another tracer),
    cast from the sensor towards each point, meets the world there (to the readings' 1 cm noise)."""
    pytest.importorskip("google.protobuf")
    from websockets.sync.client import connect

    from goggles.render.embree import EmbreeTracer, embree_available
    from goggles.rig.runfile import parse_run_config
    from goggles.transport.schema import decode_any

    data = {
        "run": {"mode": "sim", "seed": 1},
        "clock": {"scale": 3.0},
        "lcm": {"enabled": False},
        "zmq": {"enabled": False},
        "vehicle": [{"name": "quad0", "start": [0.0, 0.0, 0.1, 0.0], "floor_z": 0.1}],
        "range_sensor": [  # beams along the sensor's +z, turned 120 degrees about y: ahead and down
            {
                "vehicle": "quad0",
                "name": "tof",
                "preset": "vl53l5cx",
                "position": [0.1, 0, 0.05],
                "rpy_deg": [0, 120, 0],
            }
        ],
    }
    config = parse_run_config(data)
    sink, kept = FoxgloveSink(port=free_port(), scene_interval_s=0.0), Kept()
    engine = Engine(config, sinks=[sink, kept])
    topic = "/quad0/tof/ranges/points"
    try:
        with connect(f"ws://127.0.0.1:{sink.port}", subprotocols=SUBPROTOCOLS, max_size=2**27) as socket:
            viewer = Viewer(socket)
            engine.run(duration=0.05)
            viewer.wait_for({topic}, time.monotonic() + 10)
            assert viewer.channels[topic]["schemaName"] == "foxglove.PointCloud"
            viewer.subscribe([topic])
            kept.messages.clear()
            engine.run(duration=0.25)
            got, deadline = None, time.monotonic() + 20
            while got is None:
                name, message = viewer.next(deadline)
                got = message if name == topic else None
            static = engine.rig.built.scene.static
    finally:
        engine.close()
        sink.close()
    readings = next(decode_any(raw) for channel, raw in kept.messages if channel == "quad0/tof/ranges")
    valid = np.isfinite(readings.ranges)
    assert valid.sum() >= 32, "most zones must see the floor ahead"
    assert got.frame_id == "world" and [f.name for f in got.fields] == ["x", "y", "z", "range"]
    local = np.frombuffer(got.data, np.float32).reshape(-1, 4)
    np.testing.assert_allclose(local[:, 3], np.asarray(readings.ranges)[valid], rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(local[:, :3], axis=1), local[:, 3], rtol=1e-5)
    assert (local[:, 2] > 0).all()  # along the beams: the sensor's +z
    if not embree_available():
        return
    from scipy.spatial.transform import Rotation

    p, q = got.pose.position, got.pose.orientation
    R_WS = Rotation.from_quat([q.x, q.y, q.z, q.w]).as_matrix()
    origin = np.array([p.x, p.y, p.z])
    world = local[:, :3] @ R_WS.T + origin
    directions = (world - origin) / np.linalg.norm(world - origin, axis=1, keepdims=True)
    tracer = EmbreeTracer(static, threads=1)
    t, _ = tracer.trace(np.tile(origin, (len(world), 1)), directions)
    tracer.close()
    np.testing.assert_allclose(t, local[:, 3], atol=0.05)
