"""Start Arize Phoenix with its OTLP/gRPC receiver on 127.0.0.1: `python phoenix_local.py serve`.

Why: Phoenix's gRPC server (phoenix/server/grpc_server.py) binds `[::]:{PHOENIX_GRPC_PORT}`,
every interface, whatever PHOENIX_HOST says; test servers here listen on 127.0.0.1 only.
Rather than patch the installed package, this wraps grpc.aio's `Server.add_insecure_port` /
`add_secure_port` to keep the port and replace the host, then runs Phoenix's own entry point
(`phoenix.server.main:main`, what the venv's `phoenix` script runs) in this process.
"""
import sys

import grpc.aio

LOOPBACK = "127.0.0.1"


def _loopback(address: str) -> str:
    # "[::]:4317", "0.0.0.0:4317", "localhost:4317" -> "127.0.0.1:4317"
    _, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"unexpected gRPC bind address {address!r}")
    return f"{LOOPBACK}:{port}"


def _wrap(method):
    def bind(self, address, *args, **kwargs):
        return method(self, _loopback(address), *args, **kwargs)

    return bind


def main() -> None:
    server = grpc.aio._server.Server  # the class grpc.aio.server() instantiates
    server.add_insecure_port = _wrap(server.add_insecure_port)
    server.add_secure_port = _wrap(server.add_secure_port)
    from phoenix.server.main import main as phoenix_main

    sys.argv[0] = "phoenix"
    sys.exit(phoenix_main())


if __name__ == "__main__":
    main()
