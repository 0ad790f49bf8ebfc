"""goggles: render what a drone's sensors would see inside a photogrammetry world.

Data flows one way: pose sources -> world (``goggles.scene``) -> renderer (``goggles.render``)
-> sensor models -> outputs. Each subpackage's ``__init__`` states the contract of its part.
"""

__version__ = "0.1.0"
