"""The `anges` command: its arguments, the stream commands, and what it draws on a terminal."""
