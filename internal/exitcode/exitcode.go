// Package exitcode carries the exit status a command wants along with its
// error, from the package that decides it to the main function that exits.
package exitcode

import "errors"

// Usage is the status of an error that names none: bad flags, bad input,
// something that could not be checked (every gpurun command's "2").
const Usage = 2

// Error is an error with the exit status the command should end with.
type Error struct {
	Code int
	Err  error
}

// New returns err with the exit status code.
func New(code int, err error) error { return &Error{Code: code, Err: err} }

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the error the status was given to.
func (e *Error) Unwrap() error { return e.Err }

// Of returns the exit status for err: 0 for nil, the Code of the first
// *Error in its chain, else Usage.
func Of(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return Usage
}
