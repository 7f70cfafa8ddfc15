// Package layering holds no code, only the test that enforces the floors
// of docs/architecture.md: every package of the module is on one floor,
// imports only packages on its own floor or below, and production code
// imports no test-support package (except gpu/devverify, a verification
// tool, which uses internal/gputest's inputs).
package layering
