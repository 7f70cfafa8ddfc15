//go:build cgo

package app

const cgoEnabled = true
