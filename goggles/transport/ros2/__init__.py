"""ROS 2 without ROS: the engine's outputs as ROS 2 topics over DDS, and ROS 2 poses and commands as
inputs (``bus.Ros2Bus``); the messages written as CDR by ``cdr``, their DDS types in ``types``.

Needs ``cyclonedds`` (``pip install 'goggles[ros2]'``). Custom messages are in ``msg/``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: ROS 2 distributions whose message layouts goggles writes (they differ in sensor_msgs/Range).
DISTROS = ("humble", "jazzy")


@dataclass(frozen=True)
class Ros2Settings:
    """A run's ``[ros2]`` table: topics under ``namespace`` on DDS domain ``domain_id`` (ROS_DOMAIN_ID)."""

    namespace: str = "/goggles"
    domain_id: int = 0
    distro: str = "humble"
