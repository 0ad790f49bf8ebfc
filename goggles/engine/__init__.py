"""The engine: a run's rig driven over time, its inputs applied and its outputs published.

``Engine`` advances the rig by one step (physics to the next event, every event due) and publishes
what is due; drivers run that step in sim, lockstep and live mode, and replay drives it along a log.
"""

from goggles.engine.engine import Engine

__all__ = ["Engine"]
