"""Exceptions a person can act on: each names the thing, the bad value and the accepted form."""


class GogglesError(Exception):
    """Base class of every error goggles raises on purpose."""


class SceneError(GogglesError):
    """A scene file or mesh asset cannot be used (names the file and the key or problem)."""


class ConfigError(GogglesError):
    """A command-line value or configuration entry is malformed."""


def require(module: str, extra: str, feature: str) -> None:
    """Check that an optional package is installed, or say how to install it.

    Raises:
        ConfigError: ``feature`` needs ``module``: ``pip install 'goggles[extra]'``.
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"{feature} needs the {module!r} package: pip install 'goggles[{extra}]'")
