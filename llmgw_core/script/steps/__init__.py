"""One module per step (or family of steps); each registers itself with `@step`.

`STEP_MODULES` names the module of every step, so the runner imports only the
steps a script names: a new step is a module with `@step("name", ...)` and a
line here. Keep this file free of imports; it is read before any step loads.
"""

STEP_MODULES: dict[str, str] = {
    "apply": "llmgw_core.script.steps.apply",
    "ask": "llmgw_core.script.steps.ask",
    "bench": "llmgw_core.script.steps.bench",
    "clusters": "llmgw_core.script.steps.clusters",
    "doctor": "llmgw_core.script.steps.doctor",
    "estimate": "llmgw_core.script.steps.estimate",
    "explain": "llmgw_core.script.steps.explain",
    "fabric-test": "llmgw_core.script.steps.fabric",
    "gateway": "llmgw_core.script.steps.gateway",
    "keep": "llmgw_core.script.steps.keep",
    "logs": "llmgw_core.script.steps.logs",
    "metrics": "llmgw_core.script.steps.metrics",
    "nodes": "llmgw_core.script.steps.nodes",
    "plan": "llmgw_core.script.steps.plan",
    "replicas": "llmgw_core.script.steps.replicas",
    "serve": "llmgw_core.script.steps.serve",
    "stop": "llmgw_core.script.steps.stop",
    "usage": "llmgw_core.script.steps.usage",
}
"""Step name → the module that registers it (imported when a script names the step)."""
