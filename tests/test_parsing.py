# Corpus tests/malformed_replies.json: a JSON list of {"name": str, "reply": str or any JSON value (the model's reply; a string is repeated "repeat" times when given), "expect": "ok" | "error", "actions": [the normalized actions, for "ok"], "mentions": [case-insensitive substrings of the feedback, for "error"]}.
"""parse_reply: every accepted form, every corpus entry, coercions, and that nothing but FormatError escapes."""

import json
import random
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest

from anges.exceptions import FormatError
from anges.prompt.parsing import MAX_REPLY_CHARS, Param, ParsedReply, parse_reply

CORPUS_PATH = Path(__file__).with_name("malformed_replies.json")


@dataclass
class StubAction:
    type: str
    params: dict = field(default_factory=dict)
    unique_action: bool = False
    returning_action: bool = False
    may_end_reply: bool = False


class LegacyAction:
    """A custom action written before `params` existed."""

    type = "LEGACY_SEARCH"
    unique_action = False
    returning_action = False


def _returning(name: str) -> StubAction:
    content = Param(str, non_empty=True, description="the message for the user")
    return StubAction(name, {"content": content}, unique_action=True, returning_action=True,
                      may_end_reply=name == "TASK_COMPLETE")


REGISTRY = {
    "RUN_SHELL_CMD": StubAction("RUN_SHELL_CMD", {
        "command": Param(str, non_empty=True, description="the shell command to run"),
        "shell_cmd_timeout": Param(int, required=False, description="seconds before the command is stopped"),
        "run_in_background": Param(bool, required=False),
    }),
    "EDIT_FILE": StubAction("EDIT_FILE", {
        "directive_line": Param(str, description="e.g. NEW_FILE path"),
        "content": Param(str, required=False),
        "old_text": Param(str, required=False),
    }),
    "TASK_COMPLETE": _returning("TASK_COMPLETE"),
    "HELP_NEEDED": _returning("HELP_NEEDED"),
    "AGENT_TEXT_RESPONSE": _returning("AGENT_TEXT_RESPONSE"),
    "LEGACY_SEARCH": LegacyAction(),
}


def load_corpus() -> list[dict]:
    """The corpus entries, with each `repeat` applied to its reply."""
    entries = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
    for entry in entries:
        if "repeat" in entry:
            entry["reply"] = entry["reply"] * entry["repeat"]
    return entries


CORPUS = load_corpus()
OK_ENTRIES = [entry for entry in CORPUS if entry["expect"] == "ok"]
ERROR_ENTRIES = [entry for entry in CORPUS if entry["expect"] == "error"]


def reply(*actions, **fields) -> str:
    return json.dumps({"analysis": "a", "reasoning": "r", **fields, "actions": list(actions)})


def test_corpus_is_well_formed_and_covers_the_known_failures():
    assert len(CORPUS) >= 45
    assert len({entry["name"] for entry in CORPUS}) == len(CORPUS)
    for entry in CORPUS:
        assert entry["expect"] in ("ok", "error"), entry["name"]
        assert ("actions" in entry) == (entry["expect"] == "ok"), entry["name"]
        assert entry.get("mentions", ["x"]), entry["name"]
    names = {entry["name"] for entry in CORPUS}
    assert {
        "reply_null_value", "text_null", "text_number", "text_empty_list", "empty_string", "whitespace_only",
        "lone_json_string", "truncated_mid_string", "truncated_mid_array", "nested_fences", "two_json_objects",
        "json_with_comments", "single_quoted_python_dict", "unknown_action_type", "lowercase_type_with_spaces",
        "missing_content_task_complete", "task_complete_before_run_shell", "timeout_abc", "timeout_as_string_30",
        "background_yes", "actions_as_string", "actions_null", "huge_reply_3mb", "binary_garbage",
        "html_error_page", "markdown_only",
    } <= names


@pytest.mark.parametrize("entry", OK_ENTRIES, ids=[entry["name"] for entry in OK_ENTRIES])
def test_accepted_corpus_entry_parses_to_the_expected_actions(entry):
    parsed = parse_reply(entry["reply"], REGISTRY)
    assert isinstance(parsed, ParsedReply)
    assert parsed.actions == entry["actions"]
    assert parsed.raw == entry["reply"]
    assert isinstance(parsed.analysis, str) and isinstance(parsed.reasoning, str)


@pytest.mark.parametrize("entry", ERROR_ENTRIES, ids=[entry["name"] for entry in ERROR_ENTRIES])
def test_rejected_corpus_entry_raises_format_error_naming_the_problem(entry):
    with pytest.raises(FormatError) as caught:
        parse_reply(entry["reply"], REGISTRY)
    feedback = caught.value.feedback
    assert isinstance(feedback, str) and feedback.strip()
    assert str(caught.value) == feedback
    for word in entry["mentions"]:
        assert word.lower() in feedback.lower(), f"{word!r} not in feedback: {feedback}"


def test_huge_corpus_entry_is_over_the_limit():
    entry = next(entry for entry in CORPUS if entry["name"] == "huge_reply_3mb")
    assert len(entry["reply"]) > MAX_REPLY_CHARS


def test_coercions_produce_the_declared_types():
    parsed = parse_reply(reply(
        {"action_type": "RUN_SHELL_CMD", "command": 7, "shell_cmd_timeout": " 45 ", "run_in_background": "false"},
        {"action_type": "RUN_SHELL_CMD", "command": "b", "shell_cmd_timeout": 30.0, "run_in_background": 1},
        {"action_type": "RUN_SHELL_CMD", "command": "c", "shell_cmd_timeout": "1e2", "run_in_background": True},
    ), REGISTRY)
    first, second, third = parsed.actions
    assert first["command"] == "7" and first["shell_cmd_timeout"] == 45 and first["run_in_background"] is False
    assert type(second["shell_cmd_timeout"]) is int and second["run_in_background"] is True
    assert third["shell_cmd_timeout"] == 100 and type(third["shell_cmd_timeout"]) is int


@pytest.mark.parametrize("value, expected", [("1.5", 1.5), (2, 2.0), (" 0.25 ", 0.25), (3.0, 3.0)])
def test_float_fields_accept_numbers_and_numeric_strings(value, expected):
    registry = {"WAIT": StubAction("WAIT", {"seconds": Param(float)})}
    parsed = parse_reply(reply({"action_type": "WAIT", "seconds": value}), registry)
    assert parsed.actions[0]["seconds"] == expected and type(parsed.actions[0]["seconds"]) is float


@pytest.mark.parametrize("value", ["soon", "nan", "inf", True, [1], None])
def test_float_fields_reject_what_is_not_a_finite_number(value):
    registry = {"WAIT": StubAction("WAIT", {"seconds": Param(float)})}
    with pytest.raises(FormatError, match="seconds"):
        parse_reply(reply({"action_type": "WAIT", "seconds": value}), registry)


@pytest.mark.parametrize("value", ["30s", "1.5", "", "9" * 5000, [30], {"s": 30}, False])
def test_int_fields_reject_lossy_or_ambiguous_values(value):
    with pytest.raises(FormatError, match="shell_cmd_timeout"):
        parse_reply(reply({"action_type": "RUN_SHELL_CMD", "command": "ls", "shell_cmd_timeout": value}), REGISTRY)


def test_list_and_dict_fields_take_only_their_kind():
    registry = {"BATCH": StubAction("BATCH", {"items": Param(list), "options": Param(dict, required=False)})}
    parsed = parse_reply(reply({"action_type": "BATCH", "items": [1, 2], "options": {"x": 1}}), registry)
    assert parsed.actions == [{"action_type": "BATCH", "items": [1, 2], "options": {"x": 1}}]
    with pytest.raises(FormatError, match='"items" must be a list'):
        parse_reply(reply({"action_type": "BATCH", "items": "1,2"}), registry)
    with pytest.raises(FormatError, match='"options" must be a JSON object'):
        parse_reply(reply({"action_type": "BATCH", "items": [], "options": [1]}), registry)


def test_text_fields_are_strings_whatever_the_model_sent():
    action = {"action_type": "RUN_SHELL_CMD", "command": "ls"}
    parsed = parse_reply(json.dumps({"analysis": {"files": 3}, "reasoning": ["é", 2], "actions": [action]}),
                         REGISTRY)
    assert parsed.analysis == '{"files": 3}' and parsed.reasoning == '["é", 2]'
    parsed = parse_reply(json.dumps({"analysis": 1.5, "reasoning": None, "actions": [action]}), REGISTRY)
    assert parsed.analysis == "1.5" and parsed.reasoning == ""


def test_text_before_the_reply_is_kept_out_of_the_fields():
    text = '<think>draft: {"analysis": "wrong", "actions": []}</think>\n' + reply(
        {"action_type": "AGENT_TEXT_RESPONSE", "content": "hi"}, analysis="right")
    parsed = parse_reply(text, REGISTRY)
    assert parsed.analysis == "right" and parsed.raw == text


def test_the_reply_dict_from_the_model_is_not_modified_in_place():
    text = reply({"type": "run_shell_cmd", "command": "ls", "shell_cmd_timeout": "5"})
    first = parse_reply(text, REGISTRY).actions
    first[0]["command"] = "changed"
    assert parse_reply(text, REGISTRY).actions == [{"action_type": "RUN_SHELL_CMD", "command": "ls",
                                                    "shell_cmd_timeout": 5}]


def test_bytes_are_read_as_utf8():
    parsed = parse_reply(reply({"action_type": "AGENT_TEXT_RESPONSE", "content": "naïve"}).encode(), REGISTRY)
    assert parsed.actions[0]["content"] == "naïve"
    with pytest.raises(FormatError, match="UTF-8"):
        parse_reply(b'{"actions": [{"action_type": "RUN_SHELL_CMD", "command": "\xff"}]}', REGISTRY)


def test_unique_comes_from_the_action_not_from_its_name():
    registry = {"STOP": StubAction("STOP", unique_action=True), "GO": StubAction("GO")}
    assert parse_reply(reply({"action_type": "go"}, {"action_type": "go"}), registry).actions == [
        {"action_type": "GO"}, {"action_type": "GO"}]
    with pytest.raises(FormatError, match="STOP must be the only action"):
        parse_reply(reply({"action_type": "go"}, {"action_type": "stop"}), registry)


def test_an_empty_registry_still_gives_feedback():
    with pytest.raises(FormatError, match="unknown action_type"):
        parse_reply(reply({"action_type": "RUN_SHELL_CMD", "command": "ls"}), {})


def test_many_problems_are_listed_up_to_a_limit():
    bad = [{"action_type": "RUN_SHELL_CMD", "command": ""} for _ in range(9)]
    with pytest.raises(FormatError) as caught:
        parse_reply(reply(*bad), REGISTRY)
    assert "actions[4]" in caught.value.feedback and "actions[5]" not in caught.value.feedback
    assert "4 more problems" in caught.value.feedback


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"actions": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "{" * 1_000_000,
    '{"a": "' + "\\" * 1_000_000,
    "{}" * 900_000,
    '{"action": 1}' * 100_000,
])
def test_pathological_texts_give_format_errors(text):
    with pytest.raises(FormatError):
        parse_reply(text, REGISTRY)


@pytest.mark.parametrize("text", [0, 1.5, True, object(), ["a"], {"actions": []}, bytearray(b"\xff\xfe"), b""])
def test_non_text_replies_give_format_errors(text):
    with pytest.raises(FormatError):
        parse_reply(text, REGISTRY)


def test_every_prefix_of_a_valid_reply_parses_or_raises_format_error():
    text = "```json\n" + reply(
        {"action_type": "EDIT_FILE", "directive_line": "NEW_FILE a.py", "content": 'print("{[\\"]}")\n'},
        {"action_type": "RUN_SHELL_CMD", "command": "python a.py", "shell_cmd_timeout": "10"},
    ) + "\n```"
    for end in range(len(text) + 1):
        try:
            parsed = parse_reply(text[:end], REGISTRY)
        except FormatError as error:
            assert error.feedback
        else:
            assert len(parsed.actions) == 2


def test_random_garbage_never_raises_anything_but_format_error():
    rng = random.Random(1234)
    pieces = ['{', '}', '[', ']', '"', '\\', ',', ':', ' ', '\n', 'actions', 'action_type', '"actions"', '```',
              '<think>', '</think>', 'RUN_SHELL_CMD', 'true', 'null', '1e999', '\x00', '\udc80', "'", '//', 'é']
    valid = reply({"action_type": "RUN_SHELL_CMD", "command": "ls", "shell_cmd_timeout": 3})
    for _ in range(2000):
        if rng.random() < 0.5:
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        else:
            chars = list(valid)
            for _ in range(rng.randint(1, 4)):
                chars[rng.randrange(len(chars))] = rng.choice(pieces)
            text = "".join(chars)
        try:
            parse_reply(text, REGISTRY)
        except FormatError as error:
            assert error.feedback


def test_param_is_immutable_with_documented_defaults():
    param = Param(str)
    assert (param.required, param.non_empty, param.description) == (True, False, "")
    with pytest.raises(FrozenInstanceError):
        param.required = False
