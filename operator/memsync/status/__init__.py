"""``memsync status``: what the SessionMemories of a cluster are doing, for people.

``view`` turns the objects the API server serves (plain camelCase dicts) into summaries and renders them
as text or JSON; it is pure and reads no clock. ``memsync.cli.status`` fetches the objects and prints.
"""
