"""``specon-manager``: run the manager (extender, agent API, controllers) under uvicorn.

Exit status: 0 after a clean stop; 2 for unusable settings or a command-line argument (it takes
none but ``--help`` and ``--version``), a TLS file or a named kubeconfig that cannot be used,
each in one line on stderr; 1 when it cannot start (not in a pod and no kubeconfig, a port
taken).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import ssl
import sys
from typing import Any

import uvicorn
from pydantic import ValidationError

from specon.version import version
from specon_manager.kube_connect import KubeConfigError, connect
from specon_manager.settings import ManagerSettings

USAGE = ("usage: specon-manager [--help | --version]\n\nConfigured by SPECON_MANAGER_* "
         "environment variables; see docs/manager.md.")


class _Server(uvicorn.Server):
    """One listener; signals are handled once for all of them (:func:`_serve`)."""

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass

    def capture_signals(self) -> Any:  # uvicorn >= 0.29
        import contextlib

        return contextlib.nullcontext()


#: How long SIGTERM lets requests in flight finish before they are cancelled. An agent's
#: heartbeat stream never ends by itself: without a bound the shutdown waited for it until the
#: kubelet's SIGKILL, and the leader never handed over its migrations (shutdown_handover.py) nor
#: released the Lease. The agent opens its next stream to the next leader.
DRAIN_S = 3


def configs(app: Any, settings: ManagerSettings) -> list[uvicorn.Config]:
    """The listeners: the main port (agents, /metrics, /status; TLS when a certificate is
    set) and, with ``extender_port``, the extender's own (which demands the scheduler's client
    certificate when ``extender_client_ca_file`` is set, and with ``extender_client_names``
    only one of those names: :mod:`specon_manager.peer`)."""
    cert = str(settings.tls_cert_file) if settings.tls_cert_file is not None else None
    key = str(settings.tls_key_file) if settings.tls_key_file is not None else None

    def listener(port: int, client_ca: str | None = None) -> uvicorn.Config:
        http: Any = "auto"
        if client_ca is not None and settings.extender_client_names:
            from uvicorn.config import HTTP_PROTOCOLS
            from uvicorn.importer import import_from_string

            from specon_manager.peer import name_checked

            http = name_checked(import_from_string(HTTP_PROTOCOLS["auto"]),
                                settings.extender_client_names, port)
        return uvicorn.Config(
            app, host=settings.host, port=port, log_level=settings.log_level,
            access_log=False, lifespan="off", ssl_certfile=cert, ssl_keyfile=key,
            ssl_ca_certs=client_ca, http=http, timeout_graceful_shutdown=DRAIN_S,
            ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca is not None else ssl.CERT_NONE)

    out = [listener(settings.port)]
    if settings.extender_port:
        ca = settings.extender_client_ca_file
        if ca is not None and not settings.extender_client_names:
            logging.getLogger("specon_manager").warning(
                "extender_client_names is empty: the extender port accepts any client "
                "certificate %s signed, not only the scheduler's", ca)
        out.append(listener(settings.extender_port, str(ca) if ca is not None else None))
    return out


async def _serve(servers: list[_Server]) -> None:
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for s in servers:
            s.should_exit = True
        hot = getattr(servers[0].config.app, "hot", None)
        if hot is not None:
            hot.end_streams()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(s.serve() for s in servers))


def _fail(message: str, code: int) -> int:
    print(f"specon-manager: {message}", file=sys.stderr)
    return code


def _tls_problem(settings: ManagerSettings) -> str | None:
    """Why the listeners' certificate, key or client CA cannot be used, checked before start:
    uvicorn reads them only when a listener starts, and says so in a traceback."""
    files = {"tls_cert_file": settings.tls_cert_file, "tls_key_file": settings.tls_key_file,
             "extender_client_ca_file": settings.extender_client_ca_file}
    for name, path in files.items():
        if path is None:
            continue
        try:
            path.open("rb").close()
        except OSError as exc:
            return f"{name} {path}: cannot read ({exc.strerror or exc})"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        if settings.tls_cert_file is not None and settings.tls_key_file is not None:
            what = f"tls_cert_file {settings.tls_cert_file} and tls_key_file " \
                f"{settings.tls_key_file}: not a PEM certificate and its key"
            ctx.load_cert_chain(str(settings.tls_cert_file), str(settings.tls_key_file))
        if settings.extender_client_ca_file is not None:
            what = f"extender_client_ca_file {settings.extender_client_ca_file}: not PEM " \
                "certificates"
            ctx.load_verify_locations(str(settings.extender_client_ca_file))
    except ssl.SSLError as exc:
        return f"{what} ({exc.reason or exc})"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if args == ["--version"]:
        print(f"specon-manager {version()}")
        return 0
    if args:
        return _fail(f"takes no arguments (got {' '.join(args)!r}): it is configured by "
                     "SPECON_MANAGER_* environment variables (docs/manager.md)", 2)
    try:
        settings = ManagerSettings()
    except ValidationError as exc:
        for e in exc.errors(include_url=False, include_input=False):
            where = ".".join(str(x) for x in e.get("loc", ())) or "settings"
            print(f"specon-manager: {where}: {e.get('msg', '')} (SPECON_MANAGER_* environment; "
                  "docs/manager.md)", file=sys.stderr)
        return 2
    problem = _tls_problem(settings)
    if problem is not None:
        return _fail(problem, 2)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from specon_manager.service import build

    kube = None
    if settings.kubernetes:
        try:
            kube = connect(settings.kubeconfig)
        except KubeConfigError as exc:
            hint = "" if exc.bad_input else (": set SPECON_MANAGER_KUBECONFIG, or "
                                             "SPECON_MANAGER_KUBERNETES=false to run without "
                                             "the API")
            return _fail(f"{exc}{hint}", 2 if exc.bad_input else 1)
    app, service = build(settings, kube)
    servers = [_Server(c) for c in configs(app, settings)]
    # What start-up made (modules, FastAPI's and pydantic's schemas: some 70,000 objects)
    # lives as long as the process: out of the collector's sight, so that a full collection
    # walks only the state and takes a few ms instead of about 50 (the extender's p99).
    gc.collect()
    gc.freeze()
    try:
        service.start()
        # The loop uvicorn would pick (uvloop when installed), shared by every listener.
        with asyncio.Runner(loop_factory=servers[0].config.get_loop_factory()) as runner:
            runner.run(_serve(servers))
    except SystemExit as exc:  # uvicorn's start-up failure (a port taken), logged by it
        if exc.code in (0, None):
            raise
        return _fail("a listener could not start (its error is logged above)", 1)
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
