"""Engine command lines and environments, built without starting anything.

`build_launch(LaunchRequest) -> LaunchPlan` is the entry point: one
`ShardLaunch` per node, shaped like the agent's `shard.start` spec. See
docs/engines.md for the commands, the environment and the allowlist.
"""

from llmgw_core.engines.allowlist import checked_env, is_secret_key, parse_env_options, redact_env
from llmgw_core.engines.build import build_launch, health_path, health_url
from llmgw_core.engines.from_fleet import launch_node
from llmgw_core.engines.planned import planned_argv
from llmgw_core.engines.programs import engine_program, installed_version
from llmgw_core.engines.spec import (
    FabricAdapter,
    LaunchGpu,
    LaunchNode,
    LaunchPlan,
    LaunchRequest,
    ShardCommand,
    ShardLaunch,
)
from llmgw_core.engines.validate import validate_launch

__all__ = [
    "FabricAdapter",
    "LaunchGpu",
    "LaunchNode",
    "LaunchPlan",
    "LaunchRequest",
    "ShardCommand",
    "ShardLaunch",
    "build_launch",
    "checked_env",
    "engine_program",
    "health_path",
    "health_url",
    "installed_version",
    "is_secret_key",
    "launch_node",
    "parse_env_options",
    "planned_argv",
    "redact_env",
    "validate_launch",
]
