"""Collisions: a vehicle flown into a wall, an actor or another vehicle of its swarm is reported within
one physics step of contact, with the right normal, and the configured response happens."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from goggles.dynamics import CollisionResponse, ControlMode, MultirotorSim, SimulatorSettings, Swarm, load_airframe
from goggles.dynamics.airframe import CollisionShape
from goggles.errors import ConfigError
from goggles.frames import transform
from goggles.scene import box_shape
from goggles.world import DeviceScene
from tests.conftest import quad, scene_of

FG = load_airframe("fg-quad")
WALL_X = 3.0


def walled_world(device, **kwargs):
    wall = quad([[WALL_X, 10, -1], [WALL_X, -10, -1], [WALL_X, -10, 10], [WALL_X, 10, 10]])
    floor = quad([[-10, -10, 0], [10, -10, 0], [10, 10, 0], [-10, 10, 0]])
    return DeviceScene(scene_of((wall, 1), (floor, 2)), device, **kwargs)


SPEED = 2.0  # m/s towards the wall


def fly_at_wall(sim):
    """Fly towards +x one physics step at a time until the first contact report.

    Returns the vehicle's x one step before the report, and the report."""
    sim.reset(position=[0.0, 0.0, 1.5], rotor_speed=sim.airframe.hover_speed)
    sim.set_command(ControlMode.VELOCITY, [SPEED, 0.0, 0.0, 0.0])
    previous_x = sim.states().position[0, 0]
    for _ in range(4 * 960):
        sim.step(1)
        reports = sim.contacts()
        if reports:
            return previous_x, reports[0]
        previous_x = sim.states().position[0, 0]
    raise AssertionError("no contact reported")


def assert_within_one_step(sim, previous_x, report, reach):
    """The step before the report did not touch, and the shape entered by at most one step's travel."""
    assert previous_x + reach < report.point[0]
    assert 0.0 < report.depth <= 1.5 * SPEED * sim.dt
    assert report.step == sim.step_count


@pytest.mark.parametrize("response", list(CollisionResponse))
def test_flying_into_a_wall(device, response):
    sim = MultirotorSim(
        FG, 1, SimulatorSettings(collisions=response, disturbances=False), device=device, world=walled_world(device)
    )
    previous_x, report = fly_at_wall(sim)
    assert_within_one_step(sim, previous_x, report, FG.collision_size[0])
    np.testing.assert_allclose(report.normal, [-1.0, 0.0, 0.0], atol=1e-3)
    assert report.point[0] == pytest.approx(WALL_X, abs=1e-4)
    sim.step(96)
    state = sim.states()
    if response == CollisionResponse.CRASH:
        assert state.crashed[0] and np.allclose(state.velocity[0], 0.0)
        assert state.position[0, 0] < WALL_X  # stopped at the wall
    elif response == CollisionResponse.RESET:
        assert not state.crashed[0]
        assert np.linalg.norm(state.position[0] - [0.0, 0.0, 1.5]) < 0.2  # back near the start
    else:
        assert not state.crashed[0] and state.position[0, 0] > WALL_X - 0.1  # flying on into the wall


def test_box_collision_shape(device):
    boxy = dataclasses.replace(FG, collision_shape=CollisionShape.BOX, collision_size=np.array([0.3, 0.2, 0.05]))
    sim = MultirotorSim(boxy, 1, SimulatorSettings(disturbances=False), device=device, world=walled_world(device))
    previous_x, report = fly_at_wall(sim)
    assert_within_one_step(sim, previous_x, report, 0.3)
    np.testing.assert_allclose(report.normal, [-1.0, 0.0, 0.0], atol=1e-3)


def test_flying_into_an_actor(device):
    world = walled_world(device, shapes=[box_shape("crate", [0.5, 2.0, 3.0])])
    world.set_actors([0], [transform([1.5, 0.0, 1.5], [1, 0, 0, 0])])
    sim = MultirotorSim(FG, 1, SimulatorSettings(disturbances=False), device=device, world=world)
    previous_x, report = fly_at_wall(sim)
    assert_within_one_step(sim, previous_x, report, FG.collision_size[0])
    assert report.point[0] == pytest.approx(1.25, abs=1e-4)  # the crate's face, not the wall
    np.testing.assert_allclose(report.normal, [-1.0, 0.0, 0.0], atol=1e-3)
    assert sim.states().crashed[0]


def test_a_vehicle_flies_through_the_actors_that_are_not_obstacles(device):
    """Another vehicle's body is placed for the sensors but is not an obstacle (``set_actors``'
    ``obstacles``): the crate placed after the obstacles is flown through, to the wall behind it."""
    world = walled_world(device, shapes=[box_shape("crate", [0.5, 2.0, 3.0])])
    world.set_actors([0], [transform([1.5, 0.0, 1.5], [1, 0, 0, 0])], obstacles=0)
    assert world.obstacles.count == 0 and world.actors.count == 1
    sim = MultirotorSim(FG, 1, SimulatorSettings(disturbances=False), device=device, world=world)
    _, report = fly_at_wall(sim)
    assert report.point[0] == pytest.approx(WALL_X, abs=1e-4)  # the wall's face, not the crate's
    with pytest.raises(ConfigError, match="obstacles 2: the first 0 to 1"):
        world.set_actors([0], [np.eye(4)], obstacles=2)


def test_resting_on_the_ground_is_reported_but_not_a_crash(device):
    sim = MultirotorSim(
        FG, 1, SimulatorSettings(floor_z=0.1, disturbances=False), device=device, world=walled_world(device)
    )
    sim.reset(position=[0.0, 0.0, 0.1])
    sim.step(96)
    assert sim.contacts() and not sim.states().crashed[0]  # the floor mesh is 0.1 m under the centre
    sim.set_command(ControlMode.POSITION, [0.0, 0.0, 1.0, 0.0])
    sim.step(2 * 960)  # took off: the report is the contact with the floor at its start, kept until read
    (report,) = sim.contacts()
    assert report.step < 96 + 960
    sim.step(10)
    assert sim.states().position[0, 2] == pytest.approx(1.0, abs=0.05) and sim.contacts() == []


def test_a_vehicle_whose_centre_rests_on_a_surface_is_pushed_out_along_the_face(device):
    """On its pad, a vehicle's centre lies on the pad's top (``floor_z`` at the top: the demo's start):
    neither the offset to the nearest point nor its side is defined there, and the contact's normal
    is the face's, up."""
    world = walled_world(device, shapes=[box_shape("pad", [0.5, 0.5, 0.1])])
    world.set_actors([0], [transform([0.2, 0.0, 0.05], [1, 0, 0, 0])])  # its top at 0.1 m
    sim = MultirotorSim(FG, 1, SimulatorSettings(floor_z=0.1, disturbances=False), device=device, world=world)
    sim.reset(position=[0.3, 0.1, 0.1])
    sim.step(10)
    (report,) = sim.contacts()
    np.testing.assert_allclose(report.normal, [0.0, 0.0, 1.0], atol=1e-6)
    assert report.depth == pytest.approx(FG.collision_size[0], abs=1e-4) and not sim.states().crashed[0]


HEXA = load_airframe("hexa-550")
GAP = 2.5  # m between the centres at the start


def approaching_pair(device, speed):
    """A quad at 2 m flying at ``speed`` m/s towards a hexa hovering ``GAP`` ahead, each in its own
    simulator, rotors held at hover (no floor, no noise)."""
    sims = []
    for airframe, x, v in ((FG, 0.0, speed), (HEXA, GAP, 0.0)):
        sim = MultirotorSim(airframe, 1, SimulatorSettings(floor_z=None, disturbances=False), device=device)
        sim.reset(position=[x, 0.0, 2.0], velocity=[v, 0.0, 0.0], rotor_speed=airframe.hover_speed)
        sim.set_command(ControlMode.ROTOR_SPEEDS, [airframe.hover_speed] * airframe.num_rotors)
        sims.append(sim)
    return sims


def first_overlap(device, speed) -> tuple[int, np.ndarray, np.ndarray]:
    """The first physics step at which the pair, flown apart one step at a time, overlap (their
    centres closer than the sum of their collision spheres), and where the quad and the hexa are then.
    Apart, they never meet."""
    quad, hexa = approaching_pair(device, speed)
    reach = FG.collision_size[0] + HEXA.collision_size[0]
    for step in range(1, 20 * 960):
        quad.step(1)
        hexa.step(1)
        if np.linalg.norm(quad.states().position[0] - hexa.states().position[0]) < reach:
            assert quad.contacts() == [] and hexa.contacts() == []
            return step, quad.states().position[0], hexa.states().position[0]
    raise AssertionError("their paths never overlap")


@pytest.mark.slow
@pytest.mark.parametrize("speed", [2.0, 0.3])
def test_the_vehicles_of_a_swarm_meet_where_their_paths_overlap(device, speed):
    """Stepped together a sensor period (16 steps) at a time, the vehicles of a swarm meet at the step
    their paths, flown one step at a time apart, first overlap; each names the other, with the normal
    from it and the point on its sphere. Faster than the crash speed both crash; slower, they touch."""
    expected, quad_at, hexa_at = first_overlap(device, speed)
    quad, hexa = approaching_pair(device, speed)
    swarm = Swarm([quad, hexa])
    while quad.step_count < expected + 32:
        swarm.step(16)
    (met,), (hit,) = quad.contacts(), hexa.contacts()
    assert abs(met.step - expected) <= 1 and abs(hit.step - expected) <= 1
    assert (met.other, hit.other) == (1, 0)  # the swarm's vehicles in order: the quad, the hexa
    assert swarm.vehicle(met.other) == (hexa, 0) and swarm.vehicle(hit.other) == (quad, 0)
    # From the hexa's centre to the quad's where they were flown apart: along -x, but a quad held at
    # hover open loop turns by its rotors' rounding (1.3 mm aside after 6 s on CUDA).
    away = (quad_at - hexa_at) / np.linalg.norm(quad_at - hexa_at)
    assert away[0] < -0.999
    np.testing.assert_allclose(met.normal, away, atol=1e-3)
    np.testing.assert_allclose(hit.normal, -away, atol=1e-3)
    np.testing.assert_allclose(met.point, hexa_at + HEXA.collision_size[0] * away, atol=1e-3)  # on its sphere
    assert 0.0 < met.depth <= 1.5 * speed * quad.dt
    crashed = quad.states().crashed[0], hexa.states().crashed[0]
    assert crashed == ((True, True) if speed > FG.crash_speed else (False, False))


def test_a_vehicle_resting_on_the_ground_still_hears_another_hit_it(device):
    """A hexa on the floor touches it at every step; a quad flown low into it is still its contact of
    that read (a contact with a vehicle takes the place of one with the world), and the quad's."""
    world = walled_world(device)
    hexa = MultirotorSim(HEXA, 1, SimulatorSettings(floor_z=0.0, disturbances=False), device=device, world=world)
    hexa.reset(position=[1.5, 0.0, 0.0])
    quad = MultirotorSim(FG, 1, SimulatorSettings(floor_z=0.0, disturbances=False), device=device, world=world)
    quad.reset(position=[0.0, 0.0, 0.3], rotor_speed=FG.hover_speed)
    quad.set_command(ControlMode.VELOCITY, [2.0, 0.0, 0.0, 0.0])
    swarm = Swarm([quad, hexa])
    heard = []
    for _ in range(90):
        swarm.step(16)
        heard.append([c.other for c in hexa.contacts()])
    assert heard[0] == [-1] and [0] in heard  # resting, then hit
    assert hexa.states().crashed[0] and quad.states().crashed[0]


def test_the_vehicles_of_one_simulator_meet_only_in_a_swarm(device):
    """Two quads of one simulator flying at each other pass through each other alone (a learning
    batch: worlds of their own) and meet in a swarm; a swarm of one vehicle steps as its simulator."""
    runs = {}
    for together in (False, True):
        sim = MultirotorSim(FG, 2, SimulatorSettings(floor_z=None, disturbances=False), device=device)
        sim.reset(position=[[0.0, 0.0, 2.0], [2.0, 0.0, 2.0]], rotor_speed=FG.hover_speed)
        sim.set_command(ControlMode.VELOCITY, [[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]])
        step = Swarm([sim]).step if together else sim.step
        for _ in range(3 * 60):
            step(16)
        runs[together] = sim.contacts(), sim.states()
    assert runs[False][0] == [] and not runs[False][1].crashed.any()
    assert runs[False][1].position[0, 0] > 2.0  # flew through the other's place
    assert sorted((c.vehicle, c.other) for c in runs[True][0]) == [(0, 1), (1, 0)]
    assert runs[True][1].crashed.all()  # met at 2 m/s
    lone, alone = approaching_pair(device, 2.0)[0], approaching_pair(device, 2.0)[0]
    Swarm([lone]).step(96)
    alone.step(96)
    np.testing.assert_array_equal(lone.states().position, alone.states().position)
    assert lone.others.count == 0


def test_a_vehicle_posed_from_outside_touches_the_world_where_its_shape_meets_it(device):
    """A real drone among virtual obstacles (``PosedContacts``): at its pose, each vehicle's collision
    shape touches the wall or a crate as the geometry says (point, outward normal, depth), its
    attitude turning a box; a vehicle clear of everything touches nothing. Bad poses are refused."""
    from goggles.dynamics.posed import PosedContacts

    world = walled_world(device, shapes=[box_shape("crate", [1.0, 1.0, 1.0])])
    world.set_actors([0], [transform([0.0, 3.0, 0.5], [1, 0, 0, 0])])  # faces at y = 2.5 and z = 1.0
    boxy = dataclasses.replace(FG, collision_shape=CollisionShape.BOX, collision_size=np.array([0.3, 0.2, 0.05]))
    contacts = PosedContacts([FG, boxy, boxy, HEXA], world)
    yaw_90 = [np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)]
    poses = [
        transform([WALL_X - 0.1, 0.0, 1.5], [1, 0, 0, 0]),  # 0.08 m into the wall
        transform([WALL_X - 0.25, 2.0, 1.5], [1, 0, 0, 0]),  # its 0.3 m half length 0.05 m into the wall
        transform([WALL_X - 0.25, -2.0, 1.5], yaw_90),  # turned: 0.2 m towards the wall, clear
        transform([0.0, 2.2, 0.8], [1, 0, 0, 0]),  # its 0.41 m sphere 0.11 m into the crate's side
    ]
    wall, box, turned, crate = contacts.touching(np.stack(poses), [0, 1, 2, 3], step=7)
    assert turned is None
    np.testing.assert_allclose(wall.point, [WALL_X, 0.0, 1.5], atol=1e-5)
    np.testing.assert_allclose(wall.normal, [-1.0, 0.0, 0.0], atol=1e-5)
    assert wall.depth == pytest.approx(0.08, abs=1e-5) and (wall.vehicle, wall.step) == (0, 7)
    assert box.depth == pytest.approx(0.05, abs=1e-5) and box.point[0] == pytest.approx(WALL_X, abs=1e-5)
    np.testing.assert_allclose(crate.point, [0.0, 2.5, 0.8], atol=1e-5)
    np.testing.assert_allclose(crate.normal, [0.0, -1.0, 0.0], atol=1e-5)
    assert crate.depth == pytest.approx(0.11, abs=1e-5)
    assert contacts.touching(poses[3], [0]) == [None]  # the quad's 0.18 m sphere there: 0.3 m from the crate
    bad = np.stack(poses)
    bad[1, 0, 3] = np.nan
    with pytest.raises(ConfigError, match="poses must be finite"):
        contacts.touching(bad, [0, 1, 2, 3])
    with pytest.raises(ConfigError, match=r"poses must be a \(4, 4, 4\) array"):
        contacts.touching(bad[:2], [0, 1, 2, 3])
    with pytest.raises(ConfigError, match=r"vehicles must be indices 0..3, got \[4\]"):
        contacts.touching(poses[0], [4])
