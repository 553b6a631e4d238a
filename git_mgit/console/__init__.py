"""What git-mgit shows on a terminal: progress on stderr for work that takes more
than a moment (progress), and plain-text tables (columns)."""
