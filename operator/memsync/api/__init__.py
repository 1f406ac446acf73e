"""The memory store HTTP API as data: wire models, path rules, error types, the work-item secret.

Shared by the store client and the store server so the two can never disagree on a field.
"""
