"""Markdown from a model keeps its code-like words as written (file names, globs, identifiers), in the web chat and
in the terminal, while its real emphasis, code and links still render."""

import pytest
from anges.web.render import markdown_html
from rich.console import Console

from anges.cli.render import Renderer

LITERAL = [
    ("Edit greet/__init__.py next.", "<p>Edit greet/__init__.py next.</p>"),
    ("Then run __main__.py, not __init__.", "<p>Then run __main__.py, not __init__.</p>"),
    ("Matched test_*.py and conf_*.py.", "<p>Matched test_*.py and conf_*.py.</p>"),
    ("Globs src/**/*.ts and *.py", "<p>Globs src/**/*.ts and *.py</p>"),
    ("So a*b*c is 2*3*4.", "<p>So a*b*c is 2*3*4.</p>"),
    ("See _config.yml and other_", "<p>See _config.yml and other_</p>"),
    ("(see pkg/__init__.py)", "<p>(see pkg/__init__.py)</p>"),
    ("__init_subclass__ and x_y_", "<p>__init_subclass__ and x_y_</p>"),
    (r"Escaped already: \_\_init\_\_.py", "<p>Escaped already: __init__.py</p>"),
    ("| file |\n|---|\n| greet/__init__.py |", "<td>greet/__init__.py</td>"),
]
MARKDOWN = [
    ("**bold** and _em_ and *em*", "<p><strong>bold</strong> and <em>em</em> and <em>em</em></p>"),
    ("**greet/__init__.py** changed", "<p><strong>greet/__init__.py</strong> changed</p>"),
    ("**Note:** *this is important* and __bold text__",
     "<p><strong>Note:</strong> <em>this is important</em> and <strong>bold text</strong></p>"),
    ("`__init__` and `a*b*c`", "<p><code>__init__</code> and <code>a*b*c</code></p>"),
    ("```\n__init__ *x*\n```", "<pre><code>__init__ *x*\n</code></pre>"),
    ("[pkg/__init__.py](https://x.example/a__b__c)", '<a href="https://x.example/a__b__c" target="_blank" '
                                                      'rel="noopener noreferrer nofollow">pkg/__init__.py</a>'),
    ("<https://x.example/__a__>", '<a href="https://x.example/__a__" target="_blank" rel="noopener noreferrer '
                                  'nofollow">https://x.example/__a__</a>'),
]


@pytest.mark.parametrize("text, html", LITERAL)
def test_code_like_words_are_shown_as_written_in_the_web_chat(text, html):
    assert html in markdown_html(text)


@pytest.mark.parametrize("text, html", MARKDOWN)
def test_emphasis_code_and_links_still_render(text, html):
    assert html in markdown_html(text)


def test_runs_of_backticks_that_never_close_are_text():
    text = " ".join("`" * n for n in range(1, 300)) + " greet/__init__.py"  # every run a different length
    assert markdown_html(text).endswith(" greet/__init__.py</p>\n")


def test_the_terminal_shows_an_answers_file_names_as_written():
    console = Console(record=True, force_terminal=True, width=100, color_system="standard")
    console.print(Renderer(styled=True).answer("Created greet/__init__.py and **tests/test_*.py**; run *pytest*."))
    assert console.export_text(clear=False).strip() == "Created greet/__init__.py and tests/test_*.py; run pytest."
    drawn = console.export_text(styles=True)
    assert "\x1b[1mtests/test_*.py\x1b[0m" in drawn and "\x1b[3mpytest\x1b[0m" in drawn  # bold and italic kept
