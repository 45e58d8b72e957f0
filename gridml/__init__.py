"""gridml."""
