"""Exceptions a person can act on: each names the thing, the bad value and the accepted form."""


class GogglesError(Exception):
    """Base class of every error goggles raises on purpose."""


class SceneError(GogglesError):
    """A scene file or mesh asset cannot be used (names the file and the key or problem)."""


class ConfigError(GogglesError):
    """A command-line value or configuration entry is malformed."""
