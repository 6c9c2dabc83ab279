"""READ_MIME_FILES through the real google-genai, openai and anthropic SDKs against loopback wire servers."""

import base64
import json
import os
import re
import struct
import zlib

import pytest
from wire_servers import TEST_KEY

from anges.agents import DefaultAgent
from anges.config.loading import load_config
from anges.models.scripted import ScriptedModel
from anges.store.event_store import EventStore
from anges.tools.mime import sniff

YOUTUBE = "https://www.youtube.com/watch?v=dQw4w9WgXcQ"


def png(width=3, height=2):
    """A real (tiny) PNG image."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PDF_BYTES = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def mime_type(blob):
    return blob.get("mimeType", blob.get("mime_type"))


def reply(*actions):
    return {"analysis": "", "reasoning": "look at the files", "actions": list(actions)}


def read(question, inputs, **extra):
    return {"action_type": "READ_MIME_FILES", "question": question, "inputs": inputs, **extra}


def complete():
    return reply({"action_type": "TASK_COMPLETE", "content": "done"})


@pytest.fixture
def files(tmp_path):
    (tmp_path / "shots").mkdir()
    (tmp_path / "shots" / "login.png").write_bytes(png())
    (tmp_path / "paper.pdf").write_bytes(PDF_BYTES)
    return tmp_path


def run_agent(tmp_path, replies, model_name, monkeypatch, env, max_file_bytes=20_000_000):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = load_config(overrides={"mime_reader": {"model": model_name, "max_file_bytes": max_file_bytes},
                                    "safety": {"network": True},  # links are read where the network is on
                                    "retry": {"max_attempts": 2, "initial_backoff": 0.01, "max_backoff": 0.01}})
    agent = DefaultAgent(inference_func=ScriptedModel(replies), cmd_init_dir=tmp_path, config=config)
    stream = agent.run_with_new_request("look at the files")
    return stream, [e for e in stream.events_list if e.data.get("action_type") == "READ_MIME_FILES"]


def test_gemini_gets_inline_bytes_and_links_and_the_answer_is_recorded(files, gemini_server, monkeypatch):
    gemini_server.enqueue_text("The login page shows a red error banner.", input_tokens=1290, output_tokens=12)
    stream, (event,) = run_agent(files, [
        reply(read("What error does the login page show?", ["shots/login.png", "paper.pdf", YOUTUBE],
                   output="notes/answer.md")),
        complete(),
    ], "gemini:gemini-2.5-flash", monkeypatch, gemini_server.env)

    (request,) = gemini_server.requests
    assert request.path.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert request.headers["x-goog-api-key"] == TEST_KEY
    (content,) = request.body["contents"]
    image, pdf, video, question = content["parts"]
    assert content["role"] == "user"
    # google-genai writes inlineData's mime type as mime_type, which the API accepts as well as mimeType
    assert mime_type(image["inlineData"]) == "image/png"
    # ... and its bytes in URL-safe base64
    assert base64.urlsafe_b64decode(image["inlineData"]["data"]) == (files / "shots" / "login.png").read_bytes()
    assert mime_type(pdf["inlineData"]) == "application/pdf"
    assert base64.urlsafe_b64decode(pdf["inlineData"]["data"]) == PDF_BYTES
    assert video["fileData"].get("fileUri", video["fileData"].get("file_uri")) == YOUTUBE
    assert question == {"text": "What error does the login page show?"}

    assert event.type == "action" and not event.data["is_error"]
    assert re.fullmatch(re.escape("READ_MIME_FILES shots/login.png, paper.pdf, " + YOUTUBE) +
                        r"\nANSWER after \d+\.\d\d? s \(also written to notes/answer.md\):\n"
                        "The login page shows a red error banner.", event.content)
    assert event.data["inputs"] == [
        {"source": "shots/login.png", "mime_type": "image/png", "bytes": len(png())},
        {"source": "paper.pdf", "mime_type": "application/pdf", "bytes": len(PDF_BYTES)},
        {"source": YOUTUBE, "url": YOUTUBE, "mime_type": "video/*"}]
    assert event.data["mime_model"] == "gemini-2.5-flash" and event.data["output"] == "notes/answer.md"
    assert event.data["mime_usage"] == {"input_tokens": 1290, "output_tokens": 12, "cached_tokens": 0,
                                        "estimated": False}
    assert event.data["model"] == "scripted"  # the agent's own model call that chose the action
    assert (files / "notes" / "answer.md").read_text() == "The login page shows a red error banner.\n"
    # recorded as it ran, without the bytes or the key
    stored = EventStore().load(stream.uid)
    assert stored.events_list[1].data == event.data
    dumped = json.dumps(stored.to_dict())
    assert TEST_KEY not in dumped and image["inlineData"]["data"] not in dumped


def test_openai_compatible_gets_data_urls_and_file_parts(files, openai_server, monkeypatch):
    openai_server.enqueue_text("Two pages; the second is blank.")
    _, (event,) = run_agent(files, [
        reply(read("Describe these.", ["shots/login.png", "paper.pdf", "https://example.com/chart.png"])),
        complete(),
    ], "openai:gpt-4.1-mini", monkeypatch, openai_server.env)
    (request,) = openai_server.requests
    assert request.body["model"] == "gpt-4.1-mini" and request.headers["authorization"] == f"Bearer {TEST_KEY}"
    (message,) = request.body["messages"]
    image, pdf, link, question = message["content"]
    assert image["type"] == "image_url"
    head, data = image["image_url"]["url"].split(",", 1)
    assert head == "data:image/png;base64" and base64.b64decode(data) == png()
    assert pdf["type"] == "file" and pdf["file"]["filename"] == "paper.pdf"
    head, data = pdf["file"]["file_data"].split(",", 1)
    assert head == "data:application/pdf;base64" and base64.b64decode(data) == PDF_BYTES
    assert link == {"type": "image_url", "image_url": {"url": "https://example.com/chart.png"}}
    assert question == {"type": "text", "text": "Describe these."}
    assert re.search(r"ANSWER after [\d.]+ s:\nTwo pages; the second is blank.", event.content)
    assert not event.data["is_error"]


def test_anthropic_gets_base64_image_and_document_blocks(files, anthropic_server, monkeypatch):
    anthropic_server.enqueue_text("A login form.")
    _, (event,) = run_agent(files, [reply(read("What is it?", ["shots/login.png", "paper.pdf"])), complete()],
                            "anthropic:claude-test", monkeypatch, anthropic_server.env)
    image, document, question = anthropic_server.requests[0].body["messages"][0]["content"]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == png()
    assert document["type"] == "document" and base64.b64decode(document["source"]["data"]) == PDF_BYTES
    assert question == {"type": "text", "text": "What is it?"}
    assert re.search(r"ANSWER after [\d.]+ s:\nA login form.", event.content)


def test_each_input_error_is_a_clear_error_event(files, openai_server, monkeypatch):
    (files / "notes.txt").write_text("plain text")
    (files / "big.png").write_bytes(png() + os.urandom(2000))
    (files / "empty.pdf").write_bytes(b"")
    _, events = run_agent(files, [
        reply(read("q", ["shots/missing.png"]), read("q", ["notes.txt"]), read("q", ["big.png"]),
              read("q", ["shots"]), read("q", ["empty.pdf"]), read("q", []), read("q", [YOUTUBE]),
              read("q", ["https://example.com/paper.pdf"])),
        complete(),
    ], "openai:gpt-4.1-mini", monkeypatch, openai_server.env, max_file_bytes=1000)
    assert openai_server.requests == []  # nothing was sent
    assert all(e.data["is_error"] and e.data["error"] == "input" for e in events)
    messages = [e.content.split("\n", 1)[1] for e in events]
    assert messages[0].startswith("shots/missing.png: no such file (relative paths start at ")
    assert messages[1] == ("notes.txt: unsupported type text/plain; READ_MIME_FILES reads images (PNG, JPEG, WebP, "
                           "GIF, HEIC) and PDF files")
    assert messages[2].startswith("big.png: ") and "over the limit of 1000 bytes per file" in messages[2]
    assert messages[3] == "shots: not a regular file"
    assert messages[4] == "empty.pdf: the file is empty"
    assert messages[5] == "`inputs` must be a non-empty list of file paths or URLs"
    assert messages[6] == f"{YOUTUBE}: video links need a Gemini model (set mime_reader.model to gemini:...)"
    assert "take PDFs only as local files" in messages[7]


def test_a_model_without_vision_and_a_missing_key_are_clear_errors(files, openai_server, monkeypatch):
    openai_server.enqueue_error(400, message="Invalid content type. image_url is only supported by certain models.")
    _, (no_vision,) = run_agent(files, [reply(read("q", ["shots/login.png"])), complete()],
                                "openai:gpt-3.5-turbo", monkeypatch, openai_server.env)
    assert no_vision.data["error"] == "input" and len(openai_server.requests) == 1  # a 400 is not retried
    assert "openai:gpt-3.5-turbo cannot read these inputs (is it a vision model?)" in no_vision.content
    assert "image_url is only supported by certain models" in no_vision.content
    assert "Set mime_reader.model to a multimodal model" in no_vision.content

    _, (no_key,) = run_agent(files, [reply(read("q", ["shots/login.png"])), complete()],
                             "gemini:gemini-2.5-flash", monkeypatch, {})
    assert no_key.data["error"] == "model" and "GEMINI_API_KEY" in no_key.content

    openai_server.enqueue_error(500, message="the model crashed", times=2)
    _, (server_error,) = run_agent(files, [reply(read("q", ["paper.pdf"])), complete()],
                                   "openai:gpt-4.1-mini", monkeypatch, openai_server.env)
    assert server_error.data["error"] == "model" and "gave up after 2 attempts" in server_error.content


def test_the_answer_is_kept_when_the_output_file_cannot_be_written(files, gemini_server, monkeypatch):
    gemini_server.enqueue_text("An answer.")
    (files / "taken").write_text("a file, not a folder")
    _, (event,) = run_agent(files, [reply(read("q", ["paper.pdf"], output="taken/answer.md")), complete()],
                            "gemini:gemini-2.5-flash", monkeypatch, gemini_server.env)
    assert event.data["error"] == "output" and "could not be written to taken/answer.md" in event.content
    assert event.content.endswith("ANSWER:\nAn answer.")


def test_file_types_are_sniffed_from_their_bytes():
    assert sniff(png()) == "image/png" and sniff(PDF_BYTES) == "application/pdf"
    assert sniff(b"\xff\xd8\xff\xe0rest") == "image/jpeg" and sniff(b"GIF89a...") == "image/gif"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp" and sniff(b"hello") == ""


def test_the_readers_cost_counts_against_the_request_budget(files, gemini_server, monkeypatch):
    for name, value in gemini_server.env.items():
        monkeypatch.setenv(name, value)
    gemini_server.enqueue_text("A login form.", input_tokens=1290, output_tokens=10)
    config = load_config(overrides={"mime_reader": {"model": "gemini:gemini-2.5-flash"},
                                    "prices": {"gemini-2.5-flash": {"input": 1000.0, "output": 1000.0}},
                                    "agents": {"common": {"max_cost": 1.0}}})
    agent = DefaultAgent(inference_func=ScriptedModel([reply(read("What is shown?", ["shots/login.png"])),
                                                       complete()]), cmd_init_dir=files, config=config)
    stream = agent.run_with_new_request("look")
    event, stop = stream.events_list[1], stream.events_list[2]
    assert event.data["mime_cost"] == pytest.approx(1300 * 1000.0 / 1e6)
    assert stop.type == "task_interrupted" and stop.data["reason"] == "budget"
