"""Images and PDFs a request attaches (`@chart.png`): their bytes reach each provider's request, in every prompt of
the run; the request's event records what was attached, never the bytes; a refusal says why and loses nothing."""

import base64
import hashlib
import json
import os

import pytest
from terminal_screen import ENTER
from test_cli import complete, only_stream
from test_session import finished, sessions  # noqa: F401  (the fixture)
from wire_servers import fast_retry

from anges.agents import DefaultAgent
from anges.cli.mentions import Mentions
from anges.config.loading import load_config
from anges.config.types import ModelPreset, ModelSettings
from anges.exceptions import ContextExceeded, ModelSetupError
from anges.models import get_model
from anges.models.attachments import MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS, Attachment, Request
from anges.models.base import Prompt
from anges.models.ollama_model import OllamaModel
from anges.store.event_store import EventStore

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3 + b"\xfb\xff"  # base64 of it holds + and /, not - and _
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"


def reply(*actions):
    return json.dumps({"analysis": "a", "reasoning": "r", "actions": list(actions)})


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def urlsafe(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def openai_files(body):
    content = body["messages"][-1]["content"]
    return content[0]["text"], content[1:]


def anthropic_files(body):
    content = body["messages"][-1]["content"]
    return "".join(block["text"] for block in content if block["type"] == "text"), \
        [block for block in content if block["type"] != "text"]


def gemini_files(body):
    parts = body["contents"][-1]["parts"]
    return parts[0]["text"], parts[1:]


EXPECTED = {
    "openai_server": (openai_files, [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
                                     {"type": "file", "file": {"filename": "paper.pdf",
                                                               "file_data": f"data:application/pdf;base64,{b64(PDF)}"}}]),
    "anthropic_server": (anthropic_files, [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)}}]),
    # google-genai sends the bytes URL-safe (the API reads both alphabets), under `inlineData` and `mime_type`
    "gemini_server": (gemini_files, [{"inlineData": {"data": urlsafe(PNG), "mime_type": "image/png"}},
                                     {"inlineData": {"data": urlsafe(PDF), "mime_type": "application/pdf"}}]),
}


@pytest.mark.parametrize("fixture,preset", [("openai_server", "openai"), ("gemini_server", "gemini"),
                                            ("anthropic_server", "claude")])
def test_every_prompt_of_the_run_sends_the_attached_bytes_and_the_event_records_only_facts(
        request, tmp_path, monkeypatch, fixture, preset):
    server = request.getfixturevalue(fixture)
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    server.enqueue_text(reply({"action_type": "RUN_SHELL_CMD", "command": "echo looked"}))
    server.enqueue_text(reply({"action_type": "TASK_COMPLETE", "content": "the chart rises"}))
    config = load_config()
    agent = DefaultAgent(inference_func=get_model(preset, config), cmd_init_dir=tmp_path, config=config)
    attached = (Attachment("chart.png", "image/png", PNG), Attachment("docs/paper.pdf", "application/pdf", PDF))
    stream = agent.run_with_new_request(Request("what does @chart.png show?", attached))

    assert [e.type for e in stream.events_list] == ["new_request", "action", "task_completion"]
    read, expected = EXPECTED[fixture]
    for sent in server.requests:  # the first step's prompt and the next one's
        text, files = read(sent.body)
        assert "what does @chart.png show?" in text
        assert files == expected
    assert "echo looked" in read(server.requests[1].body)[0]  # after the history, which the cache serves
    assert stream.events_list[0].data["attachments"] == [
        {"path": "chart.png", "mime_type": "image/png", "size": len(PNG), "sha256": hashlib.sha256(PNG).hexdigest()},
        {"path": "docs/paper.pdf", "mime_type": "application/pdf", "size": len(PDF),
         "sha256": hashlib.sha256(PDF).hexdigest()}]
    saved = json.dumps(EventStore().export(stream.uid))
    assert b64(PNG) not in saved and b64(PDF) not in saved and hashlib.sha256(PNG).hexdigest() in saved


def test_a_follow_up_request_without_attachments_sends_none(openai_server, tmp_path, monkeypatch):
    for name, value in openai_server.env.items():
        monkeypatch.setenv(name, value)
    openai_server.enqueue_text(reply({"action_type": "TASK_COMPLETE", "content": "a chart"}), times=2)
    config = load_config()
    agent = DefaultAgent(inference_func=get_model("openai", config), cmd_init_dir=tmp_path, config=config)
    stream = agent.run_with_new_request(Request("look", (Attachment("chart.png", "image/png", PNG),)))
    agent.run_with_new_request("and now?", stream)
    assert isinstance(openai_server.requests[0].body["messages"][0]["content"], list)
    assert isinstance(openai_server.requests[1].body["messages"][0]["content"], str)
    assert "attachments" not in stream.events_list[-2].data


def test_a_model_that_refuses_images_gets_a_clear_message_and_the_run_is_kept(openai_server, tmp_path, monkeypatch):
    for name, value in openai_server.env.items():
        monkeypatch.setenv(name, value)
    openai_server.enqueue_error(400, message="image input is not supported by this model")
    config = load_config()
    agent = DefaultAgent(inference_func=get_model("openai", config), cmd_init_dir=tmp_path, config=config)
    stream = agent.run_with_new_request(Request("look", (Attachment("chart.png", "image/png", PNG),)))
    said = json.dumps([e.content for e in stream.events_list])
    assert "image input is not supported" in said
    assert "This request attached chart.png (image/png): the model may not read images or PDFs" in said
    assert EventStore().load(stream.uid).events_list[0].data["attachments"][0]["path"] == "chart.png"


def mentions_in(folder):
    return Mentions(lambda: str(folder), lambda: lambda path: False)


def test_mentions_attach_images_and_pdfs_and_refuse_what_is_too_big_or_too_many(tmp_path):
    template_dir = load_config().prompt.template_dir
    (tmp_path / "big.png").write_bytes(PNG[:8] + bytes(MAX_ATTACHMENT_BYTES))
    names = [f"shot{number}.png" for number in range(MAX_ATTACHMENTS + 1)]
    for number, name in enumerate(names):
        (tmp_path / name).write_bytes(PNG + bytes([number]))
    (tmp_path / "paper.pdf").write_bytes(PDF)
    (tmp_path / "photo.heic").write_bytes(b"\0\0\0\x18ftypheic" + bytes(20))

    text, said = mentions_in(tmp_path).attach(
        "see @big.png @paper.pdf @photo.heic " + " ".join(f"@{name}" for name in names), template_dir)
    assert [(item.path, item.data) for item in text.attachments] == [
        ("paper.pdf", PDF), *((name, PNG + bytes([number])) for number, name in enumerate(names[:3]))]
    assert said[0] == f"@big.png: image/png, {MAX_ATTACHMENT_BYTES + 8:,} bytes: not attached: over the limit of " \
        f"{MAX_ATTACHMENT_BYTES:,} bytes a file (the agent may read it with READ_MIME_FILES)"
    assert said[1] == f"@paper.pdf: application/pdf, {len(PDF):,} bytes, attached"
    assert said[2].startswith("@photo.heic: image/heic, 32 bytes: not attached: models take PNG, JPEG, GIF, WebP and "
                              "PDF files")
    assert said[-2:] == [f"@{name}: image/png: not attached: a request attaches at most {MAX_ATTACHMENTS} images or "
                         "PDFs (the agent may read it with READ_MIME_FILES)" for name in names[3:]]
    assert "paper.pdf: application/pdf, attached after this text" in text
    assert "big.png: image/png, not included here: read it with READ_MIME_FILES" in text


def test_an_at_image_mention_in_the_terminal_reaches_the_request(openai_server, tmp_path, sessions):  # noqa: F811
    (tmp_path / "chart.png").write_bytes(PNG)
    openai_server.enqueue_text(json.dumps(complete("It rises.")))
    term = sessions("--model", "openai:gpt-test", cwd=tmp_path, env={**os.environ, **openai_server.env})
    term.send("what does @chart.png show?")
    term.send(ENTER)
    finished(term)
    content = openai_server.requests[0].body["messages"][0]["content"]
    assert content[1:] == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}}]
    assert "chart.png: image/png, attached after this text" in content[0]["text"]
    assert f"@chart.png: image/png, {len(PNG):,} bytes, attached" in term.text()
    assert only_stream().events_list[0].data["attachments"][0]["sha256"] == hashlib.sha256(PNG).hexdigest()

    openai_server.enqueue_error(400, message="image input is not supported by this model")
    term.send("and now @chart.png?")
    term.send(ENTER)
    term.wait_for("the model may not read images or PDFs")
    assert "Traceback" not in term.text()
    assert [e.type for e in only_stream().events_list][:3] == ["new_request", "task_completion", "follow_up_request"]


def test_ollama_gets_the_images_and_refuses_a_pdf_with_a_reason(ollama_server):
    ollama_server.enqueue_text("a chart")
    model = OllamaModel(ModelPreset("ollama", model="qwen2.5vl", base_url=ollama_server.url),
                        ModelSettings(max_output_tokens=1000), fast_retry())
    prompt = Prompt("what does it show?", attachments=(Attachment("chart.png", "image/png", PNG),))
    assert model(prompt) == "a chart"
    assert ollama_server.requests[0].body["messages"] == [
        {"role": "user", "content": "what does it show?", "images": [b64(PNG)]}]

    with pytest.raises(ModelSetupError, match=r"Ollama's API takes images but no PDF \(paper.pdf\)"):
        model(Prompt("and this?", attachments=(Attachment("paper.pdf", "application/pdf", PDF),)))
    assert len(ollama_server.requests) == 1


def test_a_prompt_too_long_for_the_window_is_not_blamed_on_its_images(openai_server, monkeypatch):
    for name, value in openai_server.env.items():
        monkeypatch.setenv(name, value)
    openai_server.enqueue_error(400, message="This model's maximum context length is 8192 tokens. However, you "
                                "requested 9000 tokens.")
    model = get_model("openai", load_config())
    with pytest.raises(ContextExceeded) as refused:
        model(Prompt("look", attachments=(Attachment("chart.png", "image/png", PNG),)))
    assert "may not read images" not in str(refused.value)
