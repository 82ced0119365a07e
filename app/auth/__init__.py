"""Who may do what: registration, runner and user tokens (stored only as hashes) and roles."""
