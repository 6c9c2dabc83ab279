"""Packaging for anges: the library, the CLI, and its resources as ordinary package data.

The checkout keeps `config.yaml`, `prompt_templates/` and `web/` at the top. `package_dir` maps the two
folders into the `anges` package, and `anges/config.yaml` is a symlink to the top-level file, so a wheel
holds `anges/config.yaml`, `anges/prompt_templates/` and `anges/web/`, and an editable install reads the
checkout (`anges.config.loading.resource_path` finds both).
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
TEMPLATE_PACKAGES = ["anges.prompt_templates"] + [
    f"anges.prompt_templates.{folder.name}" for folder in sorted((HERE / "prompt_templates").iterdir())
    if folder.is_dir() and not folder.name.startswith((".", "_"))
]

setup(
    name="anges",
    version="0.2.0",
    description="An LLM-powered engineering agent that works in your shell and keeps a replayable record.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["anges", "anges.*"]) + ["anges.web", *TEMPLATE_PACKAGES],
    package_dir={"anges.web": "web", "anges.prompt_templates": "prompt_templates"},
    package_data={
        "anges": ["config.yaml", "py.typed", "__init__.pyi"],  # py.typed: type checkers read our annotations
        "anges.web": ["templates/*.html", "static/*"],
        **{package: ["*.j2"] for package in TEMPLATE_PACKAGES},
    },
    install_requires=[
        "openai>=3.0",
        "google-genai>=3.0",
        "anthropic>=2.0",
        "flask>=3.0",
        "jinja2>=3.1",
        "pyyaml>=6.0",
        "markdown-it-py>=3.0",
        "nh3>=0.2.14",
        "pydantic>=2.7",
        "pluggy>=1.2",
        "jiter>=0.5",  # a streaming reply's partial JSON (already a dependency of openai)
        "httpx2>=2.0",  # Ollama's native API (already the HTTP client of the SDKs)
        "prompt_toolkit>=3.0.36",  # the terminal session's keys and live screen
        "rich>=13",  # drawing the transcript: Markdown, highlighted diffs
        "pathspec>=0.12",  # .gitignore rules, as git reads them, for the files `@` finds
        # web APIs from their OpenAPI documents (docs/openapi.md), imported only when one is configured: the
        # document checked against the specification, its $refs read across files, calls checked against schemas
        "openapi-spec-validator>=0.9",
        "jsonschema-rs>=0.25",  # the validator's fast backend: a large document is checked in a second, not a minute
        "openapi-schema-validator>=0.9",
        "jsonschema-path>=0.5",
        "jsonschema>=4.23",
        "referencing>=0.36",
    ],
    extras_require={
        "anthropic": [],  # the Anthropic SDK is a core dependency now; the extra stays for old install commands
        "mcp": ["mcp>=2.0"],
        "ray": ["ray>=2.9"],
        "rich": [],  # rich is a core dependency now; the extra stays for old install commands
        "otel": ["opentelemetry-sdk>=1.27", "opentelemetry-exporter-otlp-proto-http>=1.27"],  # docs/telemetry.md
        "acp": ["agent-client-protocol>=0.12", "mcp>=2.0"],  # editors pass their MCP servers to the agent
        "dev": [
            "pytest>=8",
            "pytest-timeout",
            "mcp>=2.0",
            "mcp-server-time",
            "playwright>=1.45",
            "ruff",
            "pytest-xdist>=3.5",  # tests/run.sh runs the suite in 3 workers: most of it waits on processes
            "mypy==2.4.1",  # tests/mypy.ini; pinned, so a new release's checks do not fail CI unannounced
            "types-PyYAML==6.0.12.20261122",
            "ray>=2.9",
            "agent-client-protocol>=0.12",
            "pyte>=0.8",  # a terminal emulator: what the CLI draws, as a person sees it
            # the sources anges/util/unicode_data.py is generated from (tests/unicode_tables.py); pinned, so that a
            # new Unicode version is a deliberate change
            "regex==2026.11.19",
            "confusable-homoglyphs==3.3.1",
            "opentelemetry-sdk>=1.27",
            "opentelemetry-exporter-otlp-proto-http>=1.27",
            "opentelemetry-proto>=1.27",  # the tests' OTLP receiver decodes what the exporter sends
            "fastapi>=0.110",  # tests/openapi_servers.py: an application whose generated document is used as it comes
            "uvicorn>=0.30",
        ],
    },
    entry_points={"console_scripts": ["anges=anges.cli.main:main"]},
)
