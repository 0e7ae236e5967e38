// Package deploy holds the checks that keep the deployment files in step with
// the code: template.yaml (the table's key and TTL attribute, the IAM actions
// the store calls, the queue timings AWS requires, the environment the
// function reads), the build targets in mk/sam.mk, and the sample events
// under events/. It is for whoever edits any of those files: a change that
// breaks an invariant fails `go test ./internal/deploy/` with the rule it
// broke, before `sam deploy` or a production incident does.
//
// The package has no code outside its tests.
package deploy
