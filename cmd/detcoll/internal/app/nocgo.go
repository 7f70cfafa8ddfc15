//go:build !cgo

package app

const cgoEnabled = false
