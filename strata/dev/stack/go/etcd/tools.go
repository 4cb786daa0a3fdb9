//go:build tools

// Package tools pins the etcd server that the local stack builds (see strata/dev/stack/build.py).
package tools

import _ "go.etcd.io/etcd/server/v3"
