"""memsync: memory stores for self-hosted agent sandboxes, kept in two-way sync by a Kubernetes operator."""

__version__ = "0.1.0"
