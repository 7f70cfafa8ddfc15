package store_test

import (
	"context"
	"fmt"
	"time"

	"github.com/detcoll/detcoll/store"
)

// A store server on loopback with a token, and a client that waits for a key
// another rank sets.
func Example() {
	srv, err := store.Listen("127.0.0.1:0", "secret")
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := store.Dial(ctx, srv.Addr(), "secret")
	if err != nil {
		panic(err)
	}
	defer c.Close()
	go func() { c.Set(ctx, "rank0/addr", []byte("10.0.0.1:7000")) }()
	v, err := c.Get(ctx, "rank0/addr") // blocks until the key exists
	if err != nil {
		panic(err)
	}
	n, _ := c.Add(ctx, "arrived", 1)
	fmt.Println(string(v), n)
	// Output: 10.0.0.1:7000 1
}
