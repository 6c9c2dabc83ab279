"""The `anges` command: parse the arguments, build the agent, run it, and turn the outcome into an exit code.

Heavy modules (the agent, the store, model SDKs) are imported only by the command that needs them, so
`anges --help` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from importlib import import_module

from anges import __version__
from anges.cli.checkpoints import add_parsers as add_checkpoint_parsers
from anges.config.arguments import (
    add_agents_md_flag,
    add_config_flag,
    add_openapi_flag,
    add_safety_flags,
    agent_type,
    config_overrides,
    count,
    positive,
)
from anges.exceptions import AngesError, UsageError
from anges.util.printable import printable

EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, EXIT_HELP_NEEDED, EXIT_STOPPED = 0, 1, 2, 3, 4

EPILOG = """\
examples:
  anges                                        the interactive session (on a terminal; also: anges -i)
  anges -q "How many Python files are here, and which is the largest?"
  anges -f task.md --path ~/src/project       the task from a file, commands run in ~/src/project
  git diff | anges -f -                        the task from stdin
  anges -i < requests.txt                      one request a line, each a follow-up on one stream
  anges --resume ID -q "now add a test"        continue a saved stream
  anges -q "list the TODOs" --output jsonl     one JSON object per event, for scripts
  anges list                                   recent streams; then: anges show ID, anges export ID --format md
  anges stats --since 2026-11-20               steps, calls, tokens, cost and where the time went, per run
  anges diff ID                                what a run changed; anges undo ID puts the files back
  anges ui                                     the web chat
  anges batch tasks.jsonl --workers 4          many tasks from a file (see: anges batch --help)
  anges acp                                    an Agent Client Protocol agent for editors (see: anges acp --help)

exit codes:
  0  the task was completed or the question answered
  3  the agent asked for help (reply with: anges --resume ID -q "...")
  4  stopped: interrupted (Ctrl-C, SIGTERM, SIGHUP), out of steps, timed out, over budget, or the model
     kept failing (provider errors after the retries, invalid or cut-off replies)
  2  usage or configuration error: bad flag, bad config file, no usable model, the provider rejects the
     key, the model id or the request (HTTP 400-404), unknown or busy stream id, an undo refused
  1  anything unexpected (a one-line message; the traceback with -v)
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: task options at the top level, history commands as subcommands."""
    parser = argparse.ArgumentParser(
        prog="anges", description="anges: an LLM agent that works in your shell and keeps a replayable record.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    task = parser.add_argument_group("the task (one of -q, -f; -i may follow either; none on a terminal: the session)")
    source = task.add_mutually_exclusive_group()
    source.add_argument("-q", "--question", metavar="TEXT", help="run one task and exit")
    source.add_argument("-f", "--input-file", metavar="FILE", help="read the task from FILE ('-' = stdin)")
    task.add_argument("-i", "--interactive", action="store_true",
                      help="interactive session (see docs/terminal.md); without a terminal, one request a line")
    task.add_argument("--resume", metavar="ID", help="continue the saved stream ID with the task as a follow-up")

    agent = parser.add_argument_group("the agent")
    agent.add_argument("--agent", metavar="TYPE", type=agent_type,
                       help="default, task_executor, task_analyzer, orchestrator, or a plug-in's type (default: "
                            "default, or the resumed stream's)")
    agent.add_argument("--model", metavar="NAME",
                       help="a preset (openai, gemini, claude, deepseek, ollama), PROVIDER:MODEL-ID, replay:FILE, "
                            "scripted:FILE or auto (default: from the config)")
    agent.add_argument("--path", metavar="DIR", help="working directory for commands and edits (default: here)")
    agent.add_argument("--cmd-prefix", metavar="STR", help="put STR before every command (e.g. 'docker exec box')")
    agent.add_argument("--notes", metavar="TEXT", action="append", default=[], help="a note for the agent (repeatable)")
    agent.add_argument("--notes-file", metavar="FILE", action="append", default=[], help="a file of notes (repeatable)")
    add_config_flag(agent)
    agent.add_argument("--max-steps", metavar="N", type=positive(int),
                       help="stop after N steps (recorded actions; approvals do not count) since the request (exit 4)")
    agent.add_argument("--timeout", metavar="SECONDS", type=positive(float),
                       help="stop the request after SECONDS (exit 4)")
    agent.add_argument("--mcp-config", metavar="FILE", help="an mcpServers JSON file of MCP servers")
    add_openapi_flag(agent)
    agent.add_argument("--record", metavar="FILE",
                       help="record every model call to FILE (replay with --model replay:FILE)")
    agent.add_argument("--action", metavar="NAME", action="append", dest="actions",
                       help="also offer this action: one a plug-in registers, or module:Class (repeatable; "
                            "see docs/plugins.md)")
    add_agents_md_flag(agent)

    safety = parser.add_argument_group("safety (see docs/safety.md)")
    add_safety_flags(safety, "where commands may write: the working directory (default), nowhere but a private /tmp, "
                             "or anywhere (no sandbox)",
                     "what an action that needs approval gets: ask you (default on a terminal), approved, or declined "
                     "(default without a terminal)")

    shown = parser.add_argument_group("output")
    shown.add_argument("--output", choices=("text", "jsonl", "json"), default="text",
                       help="text: live transcript on stderr, answer on stdout (default); jsonl: one JSON object per "
                            "event on stdout; json: one object at the end")
    shown.add_argument("-v", "--verbose", action="count", default=0,
                       help="full outputs, token usage, log messages, tracebacks")
    shown.add_argument("--quiet", action="store_true", help="no transcript: only the answer and errors")
    shown.add_argument("--version", action="version", version=f"anges {__version__}")

    # anges 0.1.x spellings
    for alias, dest in (("--cmd_init_dir", "path"), ("--cmd_prefix", "cmd_prefix"), ("--existing_stream_id", "resume"),
                        ("--mcp_config", "mcp_config")):
        parser.add_argument(alias, dest=dest, help=argparse.SUPPRESS)

    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more detail")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    listing = commands.add_parser("list", parents=[verbose], help="recent streams, children under their parent")
    listing.add_argument("-n", "--limit", type=count, default=30, metavar="N", help="top-level streams shown (0 = all)")
    listing.add_argument("--json", action="store_true", help="as a JSON list")
    show = commands.add_parser("show", parents=[verbose], help="the transcript of a stream")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="the raw stream as JSON")
    export = commands.add_parser("export", parents=[verbose], help="a stream as JSON (0.1.x format) or Markdown")
    export.add_argument("id", metavar="ID")
    export.add_argument("--format", choices=("json", "md"), default="json",
                        help="json (default: the whole stream, for `anges import`) or md (a readable report)")
    export.add_argument("-o", "--output", dest="file", metavar="FILE", help="write to FILE instead of stdout")
    imported = commands.add_parser("import", parents=[verbose], help="import a stream file (anges 0.1.x JSON too)")
    imported.add_argument("file", metavar="FILE")
    imported.add_argument("--new-id", action="store_true", help="give it a new id (when the id is taken)")
    remove = commands.add_parser("rm", parents=[verbose], help="delete streams and their child streams")
    remove.add_argument("ids", metavar="ID", nargs="+")
    models = commands.add_parser("models", help="the model presets and their context windows")
    add_config_flag(models)
    add_checkpoint_parsers(commands, [verbose])
    import_module("anges.cli.trust").add_parser(commands, [verbose])
    commands.add_parser("ui", add_help=False, help="start the web chat (see: anges ui --help)")
    commands.add_parser("batch", add_help=False, help="run many tasks from a file (see: anges batch --help)")
    commands.add_parser("acp", add_help=False, help="serve editors (Agent Client Protocol; see: anges acp --help)")
    listing.add_argument("--batch", metavar="ID", help="only the runs of batch ID (and their child streams)")
    import_module("anges.cli.stats").add_stats_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = 0
    from anges.safety.sandbox import protect_process_memory

    protect_process_memory()  # commands (ours or others') cannot read the API keys from /proc/PID/environ
    try:
        if argv[:1] == ["ui"]:
            return run_ui(argv[1:])
        if argv[:1] == ["batch"]:
            return run_batch(argv[1:])
        if argv[:1] == ["acp"]:
            return import_module("anges.acp.command").run_acp(argv[1:])
        args = build_parser().parse_args(argv)
        verbose = args.verbose
        _setup_logging(verbose)
        command = COMMANDS[args.command or "run"]
        if isinstance(command, str):
            module, _, name = command.rpartition(":")
            command = getattr(import_module(module or "anges.cli.streams"), name)
        return command(args)
    except KeyboardInterrupt:
        print("anges: interrupted", file=sys.stderr)
        return EXIT_STOPPED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_UNEXPECTED
    except (UsageError, AngesError) as exc:  # explained errors: the message says what to change
        print(f"anges: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001  (the edge: anything else becomes one line and exit 1)
        print(f"anges: unexpected error: {type(exc).__name__}: {printable(str(exc))}", file=sys.stderr)
        if verbose:
            import traceback

            traceback.print_exc()
        else:
            print("anges: run with -v for the traceback", file=sys.stderr)
        return EXIT_UNEXPECTED


# --- running tasks ------------------------------------------------------------------------------------------


def run_task(args: argparse.Namespace) -> int:
    """One-shot or interactive run; on a terminal with no task, the interactive session."""
    from anges.cli.build import Setup, close_agent
    from anges.cli.session import Session, interrupt_on_signals

    request = _read_request(args)
    interactive = args.interactive or (request is None and args.output == "text" and sys.stdin.isatty())
    if interactive and _at_a_terminal(args):
        from anges.cli.interactive import run_session

        return run_session(args, request)
    if request is None and not interactive:
        raise UsageError("no task: give one with -q TEXT, -f FILE or -i (see anges --help)")
    output = _make_output(args)
    agent = None
    try:
        setup = Setup(args)
        if request is not None and not interactive and getattr(output, "live", False):
            from anges.cli.oneshot import run_once

            outcome, agent = run_once(setup, output, request)
            return _report(outcome, output)
        agent = setup.agent(setup.stream(args.resume), output)
        session = Session(agent, output)
        if request is not None and not interactive:
            with interrupt_on_signals(session.interrupt):
                return _report(session.run(request), output)
        return _interact(session, request, quiet=args.quiet)
    finally:
        output.close()
        close_agent(agent)


def _at_a_terminal(args: argparse.Namespace) -> bool:
    """A person at a terminal that can show the session: keys from it, the transcript on it, text output."""
    from anges.cli.terminal import is_terminal

    return args.output == "text" and is_terminal(sys.stdin) and is_terminal(sys.stderr)


def _interact(session, first: str | None, quiet: bool) -> int:
    """-i without a terminal to draw on (a pipe, TERM=dumb): one request a line."""
    from anges.cli.session import interrupt_on_signals, read_lines
    from anges.config.loading import anges_home

    def run(request: str) -> None:
        with interrupt_on_signals(session.interrupt):
            _report(session.run(request), session.output)

    if first is not None:
        run(first)
        if session.ended_by:
            return EXIT_STOPPED
    if sys.stdin.isatty() and not quiet:
        print(f"anges {__version__}: type a task; exit, quit or Ctrl-D leaves; Ctrl-C stops the running task.",
              file=sys.stderr)
    for line in read_lines("anges> ", anges_home() / "history"):
        if line.startswith("/"):
            from anges.cli.every_command import is_command

            if is_command(line):
                print(f"anges: {line.split()[0]} is a command of the full session (on a terminal that can draw it); "
                      "here each line is a request, and exit, quit or Ctrl-D leaves", file=sys.stderr)
                continue
        try:
            run(line)
        except KeyboardInterrupt:
            print("anges: stopped at once", file=sys.stderr)
        if session.ended_by:  # SIGTERM or SIGHUP: the session ends with the run
            break
    return EXIT_STOPPED if session.ended_by else EXIT_OK


def _report(outcome, output) -> int:
    from anges.cli.session import exit_code

    code = exit_code(outcome)
    output.finished(outcome, code)
    return code


def _read_request(args: argparse.Namespace) -> str | None:
    """The task from -q or -f; None without either."""
    if args.interactive and args.input_file == "-":
        raise UsageError("-i reads requests from the terminal; it cannot follow -f - (stdin)")
    if args.question is not None:
        text = args.question
    elif args.input_file == "-":
        text = sys.stdin.read()
    elif args.input_file:
        from anges.cli.build import read_file
        from anges.config.loading import load_config

        text = read_file(args.input_file, load_config(args.config, config_overrides(args)).safety, args.path or ".")
    else:
        return None
    if not text.strip():
        raise UsageError("the task is empty")
    return text.strip()


def _make_output(args: argparse.Namespace):
    if args.output in ("jsonl", "json"):
        from anges.cli.output import JsonLinesOutput, JsonOutput

        return JsonLinesOutput() if args.output == "jsonl" else JsonOutput()
    from anges.cli.transcript import TextOutput

    return TextOutput(verbose=bool(args.verbose), quiet=args.quiet)


def run_ui(argv: list[str]) -> int:
    """anges ui ...: the web chat parses its own options."""
    try:
        from anges.web import main_ui
    except ImportError as exc:
        raise UsageError(f"the web chat is not available in this installation ({exc})") from None
    return main_ui(argv) or EXIT_OK


# --- batches ------------------------------------------------------------------------------------------------

EXIT_TASKS_FAILED = 5

BATCH_EPILOG = """\
task file: one task per line of a .jsonl file, or a YAML list (.yaml/.yml), fields:
  id (required, 1-64 letters, digits, - or _), task (required), path (work in this folder) or template (work in
  a fresh copy of it; neither: a fresh empty folder), agent, model, setup (a command run first in a fresh
  folder), timeout (seconds), max_steps, check (a command run in the folder after the agent: exit 0 = passed),
  check_timeout (seconds), actions (more actions to offer, as --action). Flags give the defaults; relative paths
  are from the task file.

  {"id": "fizzbuzz", "task": "Write fizzbuzz.py and test it", "template": "repos/empty", "timeout": 600}

again: the same command skips finished tasks and continues stopped ones; --retry-failed reruns failed ones.
Ctrl-C stops every running task cleanly (a second Ctrl-C at once). Each run is a stream: anges list --batch ID.

exit codes: 0 every task succeeded (and passed its check), 5 some failed, asked for help or failed their check,
4 stopped before the end (run the same command to resume), 2 bad task file, flag or config.
"""


def build_batch_parser() -> argparse.ArgumentParser:
    """The options of `anges batch`."""
    parser = argparse.ArgumentParser(
        prog="anges batch", description="Run many tasks from a file, each an ordinary run with its own stream.",
        epilog=BATCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("tasks", metavar="TASKS", help="a .jsonl or .yaml file of tasks")
    run = parser.add_argument_group("running")
    run.add_argument("--workers", metavar="N", type=positive(int),
                     help="tasks run at once (default: 4 locally; with Ray, the cluster's CPUs / --cpus-per-task)")
    run.add_argument("--batch-id", metavar="ID", help="the batch's id (default: from the task file's name and path)")
    run.add_argument("--retry-failed", action="store_true", help="run the tasks that failed last time again")
    run.add_argument("--output", "-o", metavar="FILE", help="also write the results (JSON lines) to FILE; - = stdout")
    run.add_argument("--engine", choices=("local", "ray"), default="local",
                     help="local: worker processes here (default); ray: Ray tasks (pip install 'anges[ray]')")
    ray = parser.add_argument_group("ray")
    ray.add_argument("--address", metavar="ADDR",
                     help="auto (the running cluster) or ray://HOST:10001; default: a Ray started on this machine")
    ray.add_argument("--retries", metavar="N", type=int,
                     help="times Ray runs a task again when its worker or node dies (default 3)")
    ray.add_argument("--cpus-per-task", metavar="X", type=positive(float),
                     help="Ray CPUs each task reserves (default 1; less runs more at once)")
    ray.add_argument("--env", metavar="NAME", action="append",
                     help="also pass this variable to the workers (model keys and endpoints are passed already)")
    safety = parser.add_argument_group("safety (see docs/batch.md; actions that need approval are always declined)")
    add_safety_flags(safety, "where commands may write: the task's folder (default), nowhere but a private /tmp, "
                             "or anywhere (no sandbox: commands run with your rights)")
    defaults = parser.add_argument_group("defaults for the tasks")
    defaults.add_argument("--agent", metavar="TYPE", type=agent_type)
    defaults.add_argument("--model", metavar="NAME")
    defaults.add_argument("--timeout", metavar="SECONDS", type=positive(float))
    defaults.add_argument("--max-steps", metavar="N", type=positive(int))
    defaults.add_argument("--template", metavar="DIR")
    defaults.add_argument("--path", metavar="DIR")
    defaults.add_argument("--setup", metavar="COMMAND")
    defaults.add_argument("--check", metavar="COMMAND",
                          help="run in the task's folder after the agent: exit 0 = passed")
    defaults.add_argument("--check-timeout", metavar="SECONDS", type=positive(float),
                          help="seconds the check may take (default: the agent's shell_cmd_timeout)")
    defaults.add_argument("--action", metavar="NAME", action="append", dest="actions",
                          help="also offer this action: one a plug-in registers, or module:Class (repeatable; added "
                               "to a task's own `actions`)")
    add_openapi_flag(defaults)
    add_agents_md_flag(defaults)
    add_config_flag(parser)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log messages, tracebacks")
    return parser


def run_batch(argv: list[str]) -> int:
    """anges batch TASKS ..."""
    args = build_batch_parser().parse_args(argv)
    _setup_logging(args.verbose)
    ray_only = [flag for flag, value in (("--address", args.address), ("--retries", args.retries),
                                         ("--cpus-per-task", args.cpus_per_task), ("--env", args.env))
                if value is not None]
    if args.engine != "ray" and ray_only:
        raise UsageError(f"{', '.join(ray_only)}: only with --engine ray")
    if args.retries is not None and args.retries < 0:
        raise UsageError("--retries must be 0 or more")
    from anges.batch import run_batch as start
    from anges.batch.progress import print_summary
    from anges.batch.state import BatchState, write_results

    fields = ("agent", "model", "timeout", "max_steps", "template", "path", "setup", "check", "check_timeout",
              "actions")
    report = start(args.tasks, defaults={name: getattr(args, name) for name in fields}, engine=args.engine,
                   workers=args.workers, batch_id=args.batch_id, retry_failed=args.retry_failed,
                   config_file=args.config, address=args.address,
                   retries=3 if args.retries is None else args.retries, cpus_per_task=args.cpus_per_task or 1.0,
                   env_names=tuple(args.env or ()), overrides=_batch_overrides(args))
    print_summary(report.results, sys.stderr)
    write_results(report.results, args.output)
    counts = report.counts()
    print(f"results: {BatchState(report.batch_id).results_path}; the runs: anges list --batch {report.batch_id}",
          file=sys.stderr)
    if report.stopped or counts["unfinished"]:
        print("anges batch: stopped; run the same command again to finish the batch", file=sys.stderr)
        return EXIT_STOPPED
    return EXIT_TASKS_FAILED if counts["failed"] or report.checks()["failed"] else EXIT_OK


def _batch_overrides(args: argparse.Namespace) -> dict | None:
    safety = {key: value for key, value in (("sandbox", args.sandbox), ("network", args.network)) if value is not None}
    overrides = {"safety": safety} if safety else {}
    if args.no_agents_md:
        overrides["prompt"] = {"agents_md": False}
    if args.openapi:  # the configured sources and these: a layer's list replaces the one below it
        from anges.config.arguments import with_openapi
        from anges.config.loading import load_config

        sources = with_openapi(load_config(args.config), args.openapi).tools.openapi
        overrides["tools"] = {"openapi": [source.model_dump(by_alias=True) for source in sources]}
    return overrides or None


COMMANDS: dict[str, Callable[[argparse.Namespace], int] | str] = {
    "run": run_task, "list": "list_streams", "show": "show_stream", "export": "export_stream",
    "import": "import_stream", "rm": "remove_streams", "stats": "anges.cli.stats:show_stats",
    "diff": "anges.cli.checkpoints:diff_command", "undo": "anges.cli.checkpoints:undo_command",
    "models": "anges.cli.models:list_models", "trust": "anges.cli.trust:trust_command"}
"""Subcommand -> its function here, or the name of one in `anges.cli.streams` (or `module:function`), imported when
used."""


# --- helpers ------------------------------------------------------------------------------------------------


def _setup_logging(verbose: int) -> None:
    if verbose:
        import logging

        class PrintableFormatter(logging.Formatter):  # log lines quote model replies and server errors
            def format(self, record: logging.LogRecord) -> str:
                return printable(super().format(record))

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(PrintableFormatter("%(levelname)s %(name)s: %(message)s"))
        logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.INFO, handlers=[handler])


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
