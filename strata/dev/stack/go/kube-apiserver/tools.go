//go:build tools

// Package tools pins the kube-apiserver that the local stack builds (see strata/dev/stack/build.py).
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
