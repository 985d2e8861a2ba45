"""CLI commands: train (owner fills this in; keep imports of heavy modules inside commands)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach this module's commands to the main app."""
