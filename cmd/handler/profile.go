//go:build benchprofile

package main

// Built only with -tags benchprofile, for `make bench`: when
// ONCELY_CPUPROFILE is set, the function writes a CPU profile of its first
// ONCELY_CPUPROFILE_SECONDS (default 8) to that path plus ".<pid>". The
// deployed bootstrap never contains this file.

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"
)

func init() {
	path := os.Getenv("ONCELY_CPUPROFILE")
	if path == "" {
		return
	}
	secs, err := strconv.Atoi(os.Getenv("ONCELY_CPUPROFILE_SECONDS"))
	if err != nil || secs <= 0 {
		secs = 8
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
	if err != nil {
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	time.AfterFunc(time.Duration(secs)*time.Second, func() {
		pprof.StopCPUProfile()
		f.Close()
	})
}
