// Package procstat reads a process's state and start time from
// /proc/PID/stat (Linux only): the launcher (stopped workers, live CPU
// claims) and the shared-memory transport (live peers) tell a process from
// a later one with the same pid by its start time.
package procstat
