"""The world every part of goggles shares: the static scene and moving actors on a device, and the
ray and proximity queries over them (``goggles.world.queries``). Rendering, sensors and dynamics
read it; it depends on none of them.
"""

from goggles.world.build import Beacon, World, build_world
from goggles.world.device_scene import BVH_BUILDERS, DeviceScene

__all__ = ["BVH_BUILDERS", "Beacon", "DeviceScene", "World", "build_world"]
