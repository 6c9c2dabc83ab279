"""The anges web chat (installed as `anges.web`)."""
