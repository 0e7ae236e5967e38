package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The benchmark's own measurements of the bootstrap process, from /proc.

// Stat is the part of /proc/<pid>/stat the benchmark uses.
type Stat struct {
	State     string
	Session   int
	UserTicks int64 // utime, in clock ticks
	SysTicks  int64 // stime, in clock ticks
}

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	// The command name is in parentheses and may hold spaces: split after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("malformed stat for %d", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("short stat for %d", pid)
	}
	atoi := func(x string) int64 { n, _ := strconv.ParseInt(x, 10, 64); return n }
	// Fields after the name start at field 3 (state): index = field-3.
	return Stat{State: f[0], Session: int(atoi(f[3])), UserTicks: atoi(f[11]), SysTicks: atoi(f[12])}, nil
}

// peakRSS returns VmHWM of pid in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM for %d", pid)
}
