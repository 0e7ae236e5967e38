// Package docs holds the checks that keep the documentation honest: every
// relative link and anchor in README.md and docs/ resolves, every
// environment variable the code reads is documented, and every make target
// is listed. It has tests only; nothing links it.
package docs
