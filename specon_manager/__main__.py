"""``specon-manager``: run the manager (extender, agent API, controllers) under uvicorn."""

from __future__ import annotations

import logging
import sys

import uvicorn

from specon_manager.settings import ManagerSettings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print("usage: specon-manager\n\nConfigured by SPECON_MANAGER_* environment variables; "
              "see docs/manager.md.")
        return 0
    settings = ManagerSettings()
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from specon_manager.service import build

    app, service = build(settings)
    try:
        service.start()
        uvicorn.run(app, host=settings.host, port=settings.port,
                    log_level=settings.log_level, access_log=False)
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
