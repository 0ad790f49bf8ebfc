"""goggles keys: CURVE key pairs for an exposed engine."""

from __future__ import annotations

from pathlib import Path

from goggles.errors import ConfigError


def add_parser(commands) -> None:
    keys = commands.add_parser(
        "keys",
        help="make ZeroMQ CURVE key pairs for exposing an engine beyond localhost",
        description="Writes server.key/.key_secret, client.key/.key_secret and clients/client.key into FOLDER. "
        "Run the engine with --expose 0.0.0.0 --keys FOLDER; clients connect with Client(keys=FOLDER) "
        "(client.key_secret and server.key). Clients without an accepted key get nothing and cannot send.",
    )
    keys.add_argument("folder", type=Path)
    keys.add_argument("--overwrite", "--force", action="store_true", help="replace existing keys")
    keys.set_defaults(warp=False)  # no kernels: start without loading Warp
    keys.set_defaults(run=cmd_keys)


def cmd_keys(args) -> int:
    import shutil

    import zmq.auth

    folder = args.folder
    (folder / "clients").mkdir(parents=True, exist_ok=True)
    for name in ("server", "client"):
        if (folder / f"{name}.key_secret").exists() and not args.overwrite:
            raise ConfigError(f"{folder / (name + '.key_secret')} exists; use --overwrite to replace the keys")
        zmq.auth.create_certificates(folder, name)
        (folder / f"{name}.key_secret").chmod(0o600)  # a secret key is for its owner's eyes only
    shutil.copy(folder / "client.key", folder / "clients" / "client.key")
    print(
        f"server: {folder}/server.key_secret (keep on the engine's machine)\n"
        f"client: {folder}/client.key_secret + {folder}/server.key (give to the client; Client(keys=DIR))\n"
        f"accepted clients: {folder}/clients/*.key (add more client public keys there)"
    )
    return 0
