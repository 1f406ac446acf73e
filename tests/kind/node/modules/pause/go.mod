module memsync.dev/tests/kind/pause

go 1.26.8
