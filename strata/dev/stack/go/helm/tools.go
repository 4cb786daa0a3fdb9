//go:build tools

// Package tools pins the helm client that the chart's tests build (see strata/dev/stack/build.py).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
