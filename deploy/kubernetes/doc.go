// Package kubernetes holds deed's Kubernetes manifests (a StatefulSet of
// nodes, its headless and client Services, a PodDisruptionBudget) and the
// test that decodes each strictly into the k8s.io/api types and checks its
// wiring against the deed binary's real flags. It is a module of its own,
// so k8s.io/api never becomes deed's dependency; docs/kubernetes.md walks
// through it.
package kubernetes
