"""Fixtures the learning environments' tests share."""

from __future__ import annotations

import pytest

from goggles.paths import default_scene
from goggles.scene import load_static_scene


@pytest.fixture(scope="module")
def arena():
    """The default scene, loaded once per module."""
    return load_static_scene(default_scene())
