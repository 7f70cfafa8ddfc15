//go:build !unix

package app

func stopSelf() {}

func killSelf() {}
