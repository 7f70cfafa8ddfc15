package app

import (
	"errors"
	"fmt"
)

// UsageError is bad input to a command: the flag or environment variable
// (Field, empty when the parser names it) and why. Commands exit with
// status 2 on it, as command-line tools do for usage errors.
type UsageError struct {
	Field string
	Err   error
}

func (e *UsageError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode is 2.
func (e *UsageError) ExitCode() int { return 2 }

// Usage returns a *UsageError.
func Usage(field string, err error) error { return &UsageError{Field: field, Err: err} }

// Usagef is Usage with a formatted message.
func Usagef(field, format string, args ...any) error {
	return &UsageError{Field: field, Err: fmt.Errorf(format, args...)}
}

// IsUsage reports whether err is a usage error.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}
