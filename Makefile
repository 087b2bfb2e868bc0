# Rouse: the two commands are `make run` (the server, on an embedded PostgreSQL) and `make test`.
.PHONY: run test bench fuzz build clean

run:
	bash scripts/run.sh

test:
	bash scripts/test.sh

bench:
	bash scripts/bench.sh

fuzz:
	bash scripts/fuzz.sh

build:
	bash scripts/deps.sh
	swift build

clean:
	rm -rf .build .build-tsan .build-fuzz
