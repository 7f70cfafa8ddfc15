# `make detcoll` builds bin/detcoll with the commit stamped in (this Go
# builds with -buildvcs=false, so the toolchain does not record it): the
# reports' git_commit and git_dirty, and `detcoll --version`, come from here.
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_DIRTY  := $(shell if [ -n "$$(git status --porcelain 2>/dev/null)" ]; then echo true; else echo false; fi)
VERSION    ?= $(shell git describe --tags 2>/dev/null || echo dev)
LDFLAGS    := -X main.version=$(VERSION) -X main.commit=$(GIT_COMMIT) -X main.dirty=$(GIT_DIRTY)

.PHONY: detcoll
detcoll:
	go build -ldflags "$(LDFLAGS)" -o bin/detcoll ./cmd/detcoll
