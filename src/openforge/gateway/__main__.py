"""``python -m openforge.gateway …`` = ``openforge gateway …`` (used by GatewayProcess)."""

import typer

from openforge.gateway.command import gateway

typer.run(gateway)
