"""Fixtures of the workspace tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["none", "bwrap"])
def sandbox_mode(request, monkeypatch):
    """The workspace tool tests run in both modes: every ``Workspace`` made with the
    default ``sandbox="auto"`` gets this mode instead (bubblewrap is installed in
    CI, so ``bwrap`` never falls back)."""
    from trio_agent.workspace import _workspace

    real = _workspace.choose_sandbox

    def chosen(requested):
        return real(request.param if requested == "auto" else requested)

    monkeypatch.setattr(_workspace, "choose_sandbox", chosen)
    return request.param
