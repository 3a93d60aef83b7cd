"""Logging inside pd-serve's Ray actors.

Ray's worker processes leave the root logger at WARNING with no handler of their own, so the
router's per-request decision lines (INFO) would vanish. Each actor calls `log_to_stderr()`:
pd-serve's loggers then write to the actor's stderr, which Ray keeps in the session's
`logs/worker-*.err` and, with `log_to_driver` (PD_SERVE_RAY_LOGS=1), shows on the driver.
"""
from __future__ import annotations

import logging
import os
import sys

LEVEL_ENV = "PD_SERVE_LOG_LEVEL"
PACKAGES = ("pd_serve", "transfer")  # schedulers/ is pure and logs nothing


def log_to_stderr() -> None:
    """pd-serve's loggers at $PD_SERVE_LOG_LEVEL (default INFO) to stderr; idempotent."""
    for name in PACKAGES:
        logger = logging.getLogger(name)
        logger.setLevel(os.environ.get(LEVEL_ENV, "INFO").upper())
        if not any(getattr(h, "_pd_serve", False) for h in logger.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            handler._pd_serve = True
            logger.addHandler(handler)
        logger.propagate = False  # no second copy through a root handler Ray may add
