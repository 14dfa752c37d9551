"""Keep-alive HTTP/1.1 connections shared by the requests of one or more models."""

from __future__ import annotations

from typing import final


@final
class ConnectionPool:
    """Placeholder while the pool is written (issue 16)."""
