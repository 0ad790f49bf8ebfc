"""goggles splat from-mesh|info: Gaussian splats from meshes, and what a splat file holds."""

from __future__ import annotations

from pathlib import Path

from goggles.cli.common import at_least
from goggles.errors import ConfigError


def add_parser(commands) -> None:
    splat = commands.add_parser("splat", help="Gaussian splats: make one from a mesh, or say what a file holds")
    actions = splat.add_subparsers(dest="action", required=True, metavar="ACTION")
    from_mesh = actions.add_parser(
        "from-mesh",
        help="sample a mesh (or a scene file's meshes) into a Gaussian splat PLY with its colours",
        description="Flat Gaussians over the surface of MESH (a mesh file, or a scene file: its meshes where they "
        "are placed), area-weighted, each with the albedo at its centre, written as an INRIA/graphdeco PLY "
        "(goggles.scene.mesh_splats). Place it in a scene with a [[splat]] table (units m, up +z: it is in "
        "the world's frame).",
    )
    from_mesh.add_argument("mesh", type=Path, help="a mesh file (.obj .gltf .glb .ply .stl) or a scene .toml")
    from_mesh.add_argument("out", type=Path, help="the PLY to write")
    from_mesh.add_argument("--gaussians", type=at_least(1), default=200_000, help="how many (default %(default)s)")
    from_mesh.add_argument("--seed", type=at_least(0), default=0, help="the samples' seed")
    from_mesh.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    from_mesh.set_defaults(warp=False, run=cmd_from_mesh)
    info = actions.add_parser(
        "info",
        help="what a .ply or .splat splat file holds",
        description="Read a splat file as goggles does and say its Gaussians, SH degree, extent and opacities.",
    )
    info.add_argument("file", type=Path)
    info.set_defaults(warp=False, run=cmd_info)


def cmd_from_mesh(args) -> int:
    from goggles.scene import load_static_scene
    from goggles.scene.mesh_splats import mesh_splats
    from goggles.scene.splats import write_splat_ply

    if args.out.suffix.lower() != ".ply":
        raise ConfigError(f"{args.out}: a splat made from a mesh is written as a .ply")
    if args.out.exists() and not args.overwrite:
        raise ConfigError(f"{args.out} exists; use --overwrite to replace it")
    from goggles.runtime.device_memory import check_fits

    # Sampling and writing peak at about 384 bytes a Gaussian (measured: 2M Gaussians of the YCB mug).
    check_fits(None, 400 * args.gaussians, f"--gaussians {args.gaussians}", "ask for fewer")
    scene = load_static_scene(args.mesh)
    cloud = mesh_splats(scene, args.gaussians, seed=args.seed)
    write_splat_ply(cloud, args.out)
    print(f"{len(cloud)} Gaussians over {scene.num_faces} triangles of {args.mesh} -> {args.out}")
    return 0


def cmd_info(args) -> int:
    import numpy as np

    from goggles.scene.splats import read_splat_file

    cloud = read_splat_file(args.file)
    low, high = cloud.positions.min(axis=0), cloud.positions.max(axis=0)
    print(
        f"{args.file}: {len(cloud)} Gaussians (opacity >= 1/255), SH degree {cloud.degree}, "
        f"extent {np.round(low, 3).tolist()} .. {np.round(high, 3).tolist()} (file units), "
        f"scales {cloud.scales.min():.3g} .. {cloud.scales.max():.3g}, median opacity {np.median(cloud.opacity):.2f}"
    )
    return 0
