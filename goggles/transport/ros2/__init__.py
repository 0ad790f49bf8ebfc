"""ROS 2 without ROS: the engine's outputs as ROS 2 topics over DDS, and ROS 2 poses and commands as
inputs (``bus.Ros2Bus``); the messages written as CDR by ``cdr``, their DDS types in ``types``.

Needs ``cyclonedds`` (``pip install 'goggles[ros2]'``). Custom messages are in ``msg/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from goggles.errors import ConfigError

#: ROS 2 distributions whose message layouts goggles writes (they differ in sensor_msgs/Range).
DISTROS = ("humble", "jazzy")


#: Cyclone DDS on this machine only: the loopback interface, discovery by unicast to it (what
#: ``ROS_LOCALHOST_ONLY=1`` means for ROS 2 nodes). A ROS 2 node on this machine sees goggles with
#: ``CYCLONEDDS_URI`` set to this text; ``expose`` (``--ros2-expose``) uses Cyclone's own configuration.
LOCALHOST_ONLY_CONFIG = (
    "<CycloneDDS><Domain Id='any'><General><Interfaces><NetworkInterface address='127.0.0.1'/></Interfaces>"
    "<AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<MaxAutoParticipantIndex>60</MaxAutoParticipantIndex><Peers><Peer address='127.0.0.1'/></Peers>"
    "</Discovery></Domain></CycloneDDS>"
)


def default_domain() -> int:
    """The DDS domain ROS 2's own nodes would join here: ``ROS_DOMAIN_ID`` where it is set, else 0."""
    text = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not text:
        return 0
    if not (text.isdigit() and 0 <= int(text) <= 232):
        raise ConfigError(f"ROS_DOMAIN_ID={text!r}: a DDS domain is a whole number from 0 to 232")
    return int(text)


@dataclass(frozen=True)
class Ros2Settings:
    """A run's ``[ros2]`` table: topics under ``namespace`` on DDS domain ``domain_id`` (default
    ``ROS_DOMAIN_ID``, as ROS 2's nodes, else 0), on this machine only unless ``expose`` (then on the
    networks Cyclone DDS is configured for: ``CYCLONEDDS_URI``, by default every interface)."""

    namespace: str = "/goggles"
    domain_id: int = field(default_factory=default_domain)
    distro: str = "humble"
    expose: bool = False
