"""Packaging for anges: the library, the CLI, prompt templates, web assets and the default config."""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).parent


class BuildWithResources(build_py):
    """Copy the top-level config.yaml and prompt_templates/ into the built `anges` package."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "anges"
        shutil.copy2(HERE / "config.yaml", target / "config.yaml")
        shutil.copytree(HERE / "prompt_templates", target / "prompt_templates", dirs_exist_ok=True)


setup(
    name="anges",
    version="0.2.0",
    description="An LLM-powered engineering agent that works in your shell and keeps a replayable record.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["anges", "anges.*"]) + ["anges.web"],
    package_dir={"anges.web": "web"},
    package_data={"anges.web": ["templates/*.html", "static/*", "static/**/*"]},
    install_requires=[
        "openai>=3.0",
        "google-genai>=3.0",
        "flask>=3.0",
        "jinja2>=3.1",
        "pyyaml>=6.0",
        "markdown-it-py>=3.0",
        "nh3>=0.2.14",
    ],
    extras_require={
        "anthropic": ["anthropic>=2.0"],
        "mcp": ["mcp>=2.0"],
        "ray": ["ray>=2.9", "rich>=13"],
        "rich": ["rich>=13"],
        "dev": [
            "pytest>=8",
            "pytest-timeout",
            "anthropic>=2.0",
            "mcp>=2.0",
            "mcp-server-time",
            "playwright>=1.45",
            "ruff",
            "ray>=2.9",
            "rich>=13",
        ],
    },
    entry_points={"console_scripts": ["anges=anges.cli:main"]},
    cmdclass={"build_py": BuildWithResources},
)
