// Package agreement holds the agreement test: every form of GPU and
// /dev/shm evidence that two or more front doors can express — a captured
// container from each real engine, a driver or runtime name, a CDI name, a
// device node, an environment variable, an extended resource, a joined IPC
// namespace — goes through every door that can take it, and all of them
// must reach the same decision (oci.Decide) under the same facts and policy,
// or differ only by an exception the test states with its reason. It lives
// apart from oci so that a door's change cannot break the decision's own
// tests. It needs no daemon and no root.
package agreement
