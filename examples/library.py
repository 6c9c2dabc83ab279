"""Drive an anges agent from Python: a scripted model, real commands in a temp directory.

Run: python examples/library.py   (swap ScriptedModel for get_model("openai") to use a real model)
"""

import tempfile

from anges import DefaultAgent, EventStore, ScriptedModel

model = ScriptedModel([
    {"reasoning": "Create the script.",
     "actions": [{"action_type": "EDIT_FILE", "directive_line": "NEW_FILE hello.py", "content": "print('hello')\n"}]},
    {"reasoning": "Run it to check.", "actions": [{"action_type": "RUN_SHELL_CMD", "command": "python3 hello.py"}]},
    {"reasoning": "It printed hello.",
     "actions": [{"action_type": "TASK_COMPLETE", "content": "Wrote `hello.py`; running it prints `hello`."}]},
])

with tempfile.TemporaryDirectory() as work:
    agent = DefaultAgent(inference_func=model, cmd_init_dir=work, message_handlers=[print])
    stream = agent.run_with_new_request("Write hello.py that prints hello, and run it.")

print("status:", agent.status)
print("saved as", stream.uid, "with", len(EventStore().load(stream.uid).events_list), "events")
