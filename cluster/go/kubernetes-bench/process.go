package main

// The CPU time and memory of the store's members and of the apiserver, read from /proc, so that
// each row can say what one apiserver request cost the store.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on every
// Linux architecture Kubernetes runs on (getconf CLK_TCK), and fixed in the kernel's ABI.
const clockTicksPerSecond = 100

// processMeter samples the processes a row is charged to.
type processMeter struct {
	storePIDs    []int
	apiserverPID int
}

// cpuSample is the CPU time consumed so far, in clock ticks.
type cpuSample struct {
	store     uint64
	apiserver uint64
}

func (meter processMeter) sample() (cpuSample, error) {
	var sample cpuSample
	for _, pid := range meter.storePIDs {
		ticks, err := cpuTicks(pid)
		if err != nil {
			return sample, err
		}
		sample.store += ticks
	}
	ticks, err := cpuTicks(meter.apiserverPID)
	if err != nil {
		return sample, err
	}
	sample.apiserver = ticks
	return sample, nil
}

// largestStoreRSSMiB is the resident memory of the store's largest member, in MiB.
func (meter processMeter) largestStoreRSSMiB() (float64, error) {
	var largest uint64
	for _, pid := range meter.storePIDs {
		kib, err := residentKiB(pid)
		if err != nil {
			return 0, err
		}
		largest = max(largest, kib)
	}
	return float64(largest) / 1024, nil
}

// cpuTicks is utime + stime of process pid (fields 14 and 15 of /proc/PID/stat; the command name
// in field 2 may hold spaces, so the fields are counted after its closing parenthesis).
func cpuTicks(pid int) (uint64, error) {
	content, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("the CPU time of process %d: %w", pid, err)
	}
	text := string(content)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	// After the name, field 3 (state) is fields[0], so utime (14) is fields[11], stime fields[12].
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields after the name", pid, len(fields))
	}
	user, errUser := strconv.ParseUint(fields[11], 10, 64)
	system, errSystem := strconv.ParseUint(fields[12], 10, 64)
	if errUser != nil || errSystem != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, fields[11], fields[12])
	}
	return user + system, nil
}

// residentKiB is VmRSS of process pid, in KiB.
func residentKiB(pid int) (uint64, error) {
	content, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("the memory of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(content), "\n") {
		if rest, found := strings.CutPrefix(line, "VmRSS:"); found {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				break
			}
			return strconv.ParseUint(fields[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}
