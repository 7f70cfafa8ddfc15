//go:build !race

package detcoll

const raceEnabled = false
