package main

import "strings"

// listFlags take space-separated values, as in the seed's benchmark command
// (--size-bytes 4096 65536 …); normalizeListFlags joins them with commas so
// that the flag parser sees one value.
var listFlags = map[string]bool{"--operations": true, "--size-bytes": true, "--algorithms": true, "--dtypes": true}

// launch's arguments are left alone: its flags end at the worker command,
// whose own arguments are the command's business.
func normalizeListFlags(args []string) []string {
	if len(args) > 0 && args[0] == "launch" {
		return args
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" { // everything after belongs to a child command
			return append(out, args[i:]...)
		}
		name, val, hasEq := strings.Cut(a, "=")
		if !listFlags[name] {
			out = append(out, a)
			continue
		}
		vals := []string{}
		if hasEq {
			vals = append(vals, val)
		}
		// A value that looks like a negative number is a (bad) value, not
		// a flag, so that "--size-bytes -4096" is reported as a size.
		for i+1 < len(args) && (!strings.HasPrefix(args[i+1], "-") || negativeNumber(args[i+1])) {
			vals = append(vals, args[i+1])
			i++
		}
		out = append(out, name+"="+strings.Join(vals, ","))
	}
	return out
}

// negativeNumber reports whether a looks like "-4096" or "-4K".
func negativeNumber(a string) bool { return len(a) > 1 && a[0] == '-' && a[1] >= '0' && a[1] <= '9' }
