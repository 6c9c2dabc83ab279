"""The Jinja2 templates of `prompt_templates/` (all prompt prose lives there) and the prompt's tail mark."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from anges.config.loading import resource_path
from anges.exceptions import ConfigError
from anges.util.trust import model_writable

if TYPE_CHECKING:
    import jinja2

TAIL_MARK = "\n\n# Now\n"
"""Where a prompt's tail starts: the section of what holds only for this step (background jobs, a reminder, the
feedback on an invalid reply). The agent templates put it after the history, and only when it has something."""


@lru_cache(maxsize=8)
def environment(template_dir: str = "") -> jinja2.Environment:
    """The template environment: the user's `template_dir` first, then the packaged templates."""
    import jinja2

    search = [template_dir] if template_dir else []
    search.append(str(resource_path("prompt_templates")))
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(search),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_template(name: str, template_dir: str = "", **context) -> str:
    """Render one template (a file name under the template search path, or inline source with `{{`). A
    `template_dir` where commands of a run of this process may write is refused (ConfigError): a template is code."""
    refused = model_writable(template_dir) if template_dir else ""
    if refused:
        raise ConfigError(f"prompt.template_dir {template_dir} is not used: {refused}, and a template is code")
    env = environment(template_dir)
    template = env.from_string(name) if "{{" in name or "{%" in name else env.get_template(name)
    return template.render(**context)


def split_prompt(prompt: str) -> tuple[str, str]:
    """A prompt's head and its tail (the `# Now` section, "" when there is none). Between two summary folds, the
    head of each prompt starts with the whole head of the previous one."""
    head, mark, tail = prompt.rpartition(TAIL_MARK)
    return (head, mark + tail) if mark else (prompt, "")
