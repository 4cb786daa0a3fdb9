#!/usr/bin/env bash
# The whole test suite: lint, the import layers, the type checker, the schema gate, then every
# test against the real broker that `strata dev up` fetches and starts (it stays up for the next
# run; `strata dev down` stops it).
source "$(dirname "$0")/bootstrap.sh"
ruff check .
ruff format --check .
lint-imports          # which package may import which (pyproject.toml, docs/layers.md)
mypy                  # the whole package; schemas and the fold strictly
python -m strata.schemas.evolution
if command -v go >/dev/null || [ -x /usr/local/go/bin/go ]; then  # the Volcano replica's Go module, under the race detector
  (PATH=$PATH:/usr/local/go/bin; cd strata-volcano && test -z "$(gofmt -l .)" && go vet ./... && go test -race ./...)
fi
eval "$(strata dev up)"
pytest "$@"
