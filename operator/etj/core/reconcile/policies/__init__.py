"""One module per policy, each a few pure functions with its own test module."""
