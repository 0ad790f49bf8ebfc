"""Ctrl-C held across code that swallows it (trimesh catches BaseException), then delivered."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from goggles.runtime.signals import signals_held


def swallowing(number: int = signal.SIGINT) -> None:
    """A signal raised where trimesh would catch it (its handler runs inside ``raise_signal``)."""
    try:
        signal.raise_signal(number)
    except BaseException:
        pass


def test_a_held_ctrl_c_is_delivered_when_the_swallowing_code_returns():
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            swallowing()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # left as it was


def test_a_second_ctrl_c_while_held_is_delivered_at_once():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            signal.raise_signal(signal.SIGINT)  # noted
            reached.append("after the first")
            signal.raise_signal(signal.SIGINT)  # asked again: raised here
            reached.append("after the second")
    assert reached == ["after the first"]


def test_the_handler_decides_and_ignored_signals_stay_ignored():
    stops = []
    previous = signal.signal(signal.SIGTERM, lambda *_: stops.append("stop"))
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals_held():
            swallowing(signal.SIGTERM)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert not stops
        assert stops == ["stop"]  # a stop event set, say, rather than an exception
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, ignored)


SWALLOWED_IN_TRIMESH = """
import signal, sys

class CtrlCInTrimesh:  # a Ctrl-C that lands in trimesh's import, which catches it (as its own imports do)
    def find_spec(self, name, path=None, target=None):
        if name == "trimesh":
            sys.meta_path.remove(self)
            try:
                signal.raise_signal(signal.SIGINT)
            except BaseException:
                pass
        return None

sys.meta_path.insert(0, CtrlCInTrimesh())
from goggles.cli import main
sys.exit(main(["race"]))
"""


@pytest.mark.slow
def test_goggles_race_stops_at_a_ctrl_c_that_trimesh_swallowed():
    """It flew the whole course and printed a score (exit code 0)."""
    result = subprocess.run([sys.executable, "-c", SWALLOWED_IN_TRIMESH], capture_output=True, text=True, timeout=300)
    assert result.returncode == 130, result.stdout + result.stderr[-2000:]
    assert "score=" not in result.stdout and "Traceback" not in result.stderr


def test_a_ctrl_c_before_the_command_has_its_handlers_is_exit_code_130_not_a_traceback():
    """The ``goggles`` script's first 0.1 s is the import of ``goggles.cli``."""
    code = """
import signal, sys

class CtrlCInImport:
    def find_spec(self, name, path=None, target=None):
        if name == "goggles.cli":
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlCInImport())
from goggles.console import main
sys.exit(main())
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130 and result.stderr == ""
