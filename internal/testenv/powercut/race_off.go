//go:build !race

package powercut

// raceEnabled: see Mount.
const raceEnabled = false
