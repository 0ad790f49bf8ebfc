"""Flights as files: recording (MCAP or lcm-logger), reading back, replaying into a rig with the same
or other sensors, repairing what a killed run left, and datasets of many replays."""
