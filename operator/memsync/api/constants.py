"""Fixed values of the memory store API: headers, page sizes, content and store limits, the mount root."""

from typing import Final

ANTHROPIC_VERSION: Final = "2023-06-01"
MEMORY_BETA: Final = "agent-memory-2026-07-22"
SESSIONS_BETA: Final = "managed-agents-2026-04-01"
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"

MAX_CONTENT_BYTES: Final = 102_400
MAX_PATH_BYTES: Final = 1024
MAX_PATH_SEGMENTS: Final = 20
MAX_MEMORIES_PER_STORE: Final = 10_000
MAX_STORES_PER_SESSION: Final = 8

LIST_LIMIT_MAX: Final = 100
LIST_LIMIT_FULL_MAX: Final = 20
LIST_LIMIT_DEFAULT: Final = 20

STORE_NAME_MAX: Final = 255
STORE_DESCRIPTION_MAX: Final = 1024
METADATA_MAX_PAIRS: Final = 16
METADATA_KEY_MAX: Final = 64
METADATA_VALUE_MAX: Final = 512

MARKER_FILENAME: Final = ".anthropic-memory-store"
MOUNT_ROOT: Final = "/mnt/memory"

#: How long the store client keeps an idle connection for its next request: longer than a sync sidecar's
#: default pass interval (15 s, the pass after the first up to 1.5 intervals later), so a sidecar's passes
#: reuse one connection (no TCP or TLS handshake per pass) instead of opening one each time.
CLIENT_IDLE_KEEPALIVE_S: Final = 30.0
#: How long the store server keeps an idle client connection open: longer than the client keeps it, so the
#: client always closes first and never sends a request on a connection the server is closing.
SERVER_IDLE_KEEPALIVE_S: Final = 45
