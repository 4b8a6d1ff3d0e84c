"""Who may do what: users, their permission entries, and the identity of a call (issue 32)."""
