//go:build race

package eventkey

const raceEnabled = true
