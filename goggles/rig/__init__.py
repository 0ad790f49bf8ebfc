"""The rig: what a run flies and senses, assembled in one place from its run file.

``runfile`` reads a run file into plain, checked settings; ``Rig`` builds from them the world (scene,
gates, props, people), the vehicles (fleets of simulators, or bodies posed from outside), the camera
groups with their sensor models, the range sensors and the LiDARs, without buses or a clock: the
engine drives a rig, replay re-renders one, and the learning environments, ``goggles render``,
``race``, ``fly``, ``bench`` and the preview build theirs through ``parts``, the one place each part
is constructed.
"""
