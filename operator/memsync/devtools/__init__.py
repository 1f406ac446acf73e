"""Programs shipped for tests and the demo (not used by the operator or the sync agent at run time)."""
