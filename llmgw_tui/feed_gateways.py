"""What the console asks of gateways on the live fleet: list, start, follow a log, stop.

`LiveFeed` takes these from here; each is one call into the core
(`gateway.run`, `metrics.gateway`) over the feed's open fleet and its
engine tunnels, so the console computes nothing of a gateway itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

LOG_TAIL_LINES = 500
"""Lines of a shard's log shown before following what it writes next."""


class LiveGateways:
    """The gateway half of the live feed; the feed gives `_live()` and `_engines()`."""

    def _live(self) -> Any:
        raise NotImplementedError

    def _engines(self) -> Any:
        raise NotImplementedError

    async def gateways(self) -> list[dict[str, Any]]:
        """Every running gateway with its router's workers (`gateway.run.gateway_summaries`)."""
        from llmgw_core.gateway.run import gateway_summaries

        return await gateway_summaries(self._live(), self._engines())

    async def put_behind_gateway(self, name: str) -> dict[str, Any]:
        """Start the gateway `name` on its default node, or make the running one follow."""
        from llmgw_core.gateway.run import start_gateway
        from llmgw_core.gateway.spec import GatewayArgs

        return await start_gateway(self._live(), self._engines(), GatewayArgs(name=name))

    async def follow_gateway_logs(self, name: str) -> AsyncIterator[list[str]]:
        """The router's last lines, then what it writes next (`gateway.run.gateway_log_batches`)."""
        from llmgw_core.gateway.run import gateway_log_batches

        batches = gateway_log_batches(self._live(), name, lines=LOG_TAIL_LINES, follow=True)
        try:
            async for batch in batches:
                yield batch
        finally:
            await batches.aclose()

    async def gateway_details(self) -> list[dict[str, Any]]:
        """Every running gateway, its workers and its router's counts (`metrics.gateway`)."""
        from llmgw_core.metrics.gateway import gateway_details

        return await gateway_details(self._live(), self._engines())

    async def stop_gateway(self, name: str) -> dict[str, Any]:
        """Stop and forget the gateway's router (`gateway.run.stop_gateway`)."""
        from llmgw_core.gateway.run import stop_gateway

        return await stop_gateway(self._live(), name)
