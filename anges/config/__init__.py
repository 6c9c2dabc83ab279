"""Configuration: layered YAML into frozen typed objects (`load_config`), and the flags every command shares.

Names load on first use, so `from anges.config import load_config` imports neither YAML nor pydantic.
"""

from importlib import import_module

_EXPORTS = {
    **dict.fromkeys(("load_config", "default_config", "anges_home", "resource_path"), "anges.config.loading"),
    **dict.fromkeys(("Config", "AgentConfig", "ModelPreset", "ModelSettings", "RetryConfig", "Price", "PromptConfig",
                     "WebConfig", "MCPConfig", "MimeReaderConfig", "SafetyRule", "SafetyConfig", "TelemetryConfig",
                     "ToolsConfig", "OpenAPISource", "OpenAPIAuth", "HookConfig", "HookMatch"),
                    "anges.config.types"),
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'anges.config' has no attribute {name!r}")
    return getattr(import_module(module), name)
