"""The prompt: templates, the history as the model reads it, AGENTS.md, summaries, and parsing replies."""
