module memsync.dev/bench/loadgen

go 1.22
