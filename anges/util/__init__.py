"""Small helpers every layer shares: cutting text, printable text, masking secrets, one interruptible wait."""
