"""Repositories as git sees them: bare mirrors, the commit graph and branch histories, and git
in working directories."""
