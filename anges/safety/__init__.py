"""Safety: the policy, approvals, the bubblewrap sandbox, and the runner that starts every command."""
