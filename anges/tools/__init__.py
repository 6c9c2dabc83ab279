"""The engines behind actions: file edits, images and PDFs, MCP servers."""
