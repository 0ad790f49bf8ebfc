"""An engine exposed beyond localhost: CURVE keys required; clients without an accepted key get nothing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest

from goggles.client import Client
from goggles.dynamics import ControlMode
from goggles.errors import ConfigError
from goggles.transport.buses import CurveServer, ZmqEndpoints
from tests.support import Running, free_port, run_config


def exposed_config(keys=None):
    ports = [free_port() for _ in range(3)]
    config = dataclasses.replace(
        run_config(route=False, scale=5.0, cameras=[]),
        zmq=ZmqEndpoints(*(f"tcp://0.0.0.0:{p}" for p in ports)),
    )
    loopback = ZmqEndpoints(*(f"tcp://127.0.0.1:{p}" for p in ports))
    if keys is not None:
        config = dataclasses.replace(config, curve=CurveServer(keys / "server.key_secret", keys / "clients"))
    return config, loopback


def make_keys(folder):
    subprocess.run([sys.executable, "-m", "goggles.cli", "keys", str(folder)], check=True, capture_output=True)
    return folder


def test_exposing_without_keys_is_refused():
    from goggles.engine import Engine

    config, _ = exposed_config()
    with pytest.raises(ConfigError, match="leave this machine: an exposed engine needs CURVE keys"):
        Engine(config, device="cpu")


@pytest.mark.slow
def test_only_clients_with_an_accepted_key_get_in(tmp_path):
    keys = make_keys(tmp_path / "keys")
    stranger = make_keys(tmp_path / "stranger")  # a valid key pair the engine does not accept
    (stranger / "server.key").write_bytes((keys / "server.key").read_bytes())  # knows the server's public key
    config, loopback = exposed_config(keys)
    running = Running(config)
    try:
        outsiders = [Client(loopback), Client(loopback, keys=stranger)]
        member = Client(loopback, keys=keys)
        for client in (*outsiders, member):
            client.latest("quad0/state", timeout=0.0)
        time.sleep(0.5)
        for client in outsiders:
            for _ in range(20):
                client.send_command("quad0", ControlMode.POSITION, [0.0, 0.0, 2.0, 0.0])
                time.sleep(0.02)
        for client in outsiders:
            assert client.latest("quad0/state", timeout=1.0) is None  # receives nothing
        assert running.engine.counters.received == 0  # and nothing it sent got in
        state = member.latest("quad0/state", timeout=3.0)
        assert state is not None and state.position[2] < 0.5
        member.wait_for_subscriptions(30.0)  # answered over CURVE too; a stranger is never answered
        with pytest.raises(TimeoutError, match="no engine answered"):
            outsiders[1].wait_for_subscriptions(1.0)
        deadline = time.monotonic() + 30.0
        while running.engine.counters.received == 0 and time.monotonic() < deadline:
            member.send_command("quad0", ControlMode.POSITION, [0.0, 0.0, 2.0, 0.0])
            time.sleep(0.05)
        assert running.engine.counters.received > 0
        while time.monotonic() < deadline:  # it obeys the member only: it climbs
            state = member.latest("quad0/state", timeout=2.0)
            if state.position[2] > 0.5:
                break
        assert state.position[2] > 0.5
    finally:
        running.stop.set()
        running.finish()
        for client in (*outsiders, member):
            client.close()


@pytest.mark.slow
def test_keys_without_expose_keep_loopback_and_admit_only_key_holders(tmp_path):
    """``goggles run --keys DIR`` alone: CURVE on the run file's 127.0.0.1 endpoints, not a silent no-op."""
    from goggles.cli import build_parser
    from goggles.cli.run import run_config as configured

    keys = make_keys(tmp_path / "keys")
    ports = [free_port() for _ in range(3)]
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        '[run]\nmode = "sim"\n[clock]\nscale = 5.0\n[lcm]\nenabled = false\n'
        f'[zmq]\npublish = "tcp://127.0.0.1:{ports[0]}"\ninputs = "tcp://127.0.0.1:{ports[1]}"\n'
        f'control = "tcp://127.0.0.1:{ports[2]}"\n'
        '[[vehicle]]\nname = "quad0"\nstart = [0.0, 0.0, 0.0, 0.0]\n'
    )
    config = configured(build_parser().parse_args(["run", str(run_file), "--keys", str(keys)]))
    assert config.curve == CurveServer(keys / "server.key_secret", keys / "clients")
    assert all(e.startswith("tcp://127.0.0.1:") for e in (config.zmq.publish, config.zmq.inputs, config.zmq.control))
    running = Running(config)
    try:
        stranger, member = Client(config.zmq), Client(config.zmq, keys=keys)
        assert member.latest("quad0/state", timeout=10.0) is not None
        assert stranger.latest("quad0/state", timeout=1.0) is None
    finally:
        running.stop.set()
        running.finish()
        stranger.close()
        member.close()
