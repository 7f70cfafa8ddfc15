package agree_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/internal/agree"
)

// How a communicator drives the primitive: Begin on every call, Compare
// with its own all-gather only when Begin asks, the Call in every message.
// Two goroutine "ranks" share memory as their exchange; after agreeing on
// A and B, rank 1 calls B where rank 0 calls A.
func Example() {
	const w = 2
	describe := func(r agree.Record) string { return string(r[:3]) }
	as := []*agree.Agreement{agree.New(agree.Config{Describe: describe}), agree.New(agree.Config{Describe: describe})}
	record := func(s string) *agree.Record {
		var r agree.Record
		copy(r[:], s)
		return &r
	}
	calls := make([]agree.Call, w)
	errs := make([]error, w)
	round := func(names ...string) {
		board := make([]byte, w*agree.ProposalSize)
		var wrote sync.WaitGroup
		wrote.Add(w)
		var done sync.WaitGroup
		for rank := range w {
			done.Add(1)
			go func() {
				defer done.Done()
				r := record(names[rank])
				c, need := as[rank].Begin(r)
				calls[rank], errs[rank] = c, nil
				if need {
					errs[rank] = as[rank].Compare(rank, w, c, r, func(mine, all []byte) error {
						copy(board[rank*agree.ProposalSize:], mine) // the "send"
						wrote.Done()
						wrote.Wait()
						copy(all, board) // the "receives"
						return nil
					})
				} else {
					wrote.Done()
				}
			}()
		}
		done.Wait()
	}
	round("A()", "A()") // call 1: compared, agreed
	round("B()", "B()") // call 2: compared, agreed
	round("A()", "A()") // call 3: nothing exchanged
	fmt.Println(errs, as[0].Exchanges(), calls[0] == calls[1])
	round("A()", "B()") // call 4: nothing exchanged, but the Calls differ
	fmt.Println(calls[0].Seq == calls[1].Seq, calls[0].Hash == calls[1].Hash)
	// Rank 0's receive from rank 1 sees rank 1's Call in the message tag:
	err := as[0].TagMismatch(0, calls[0], record("A()"), as[0].Peer(1, calls[1], false), errors.New("tag mismatch"))
	fmt.Println(errors.Is(err, agree.ErrMismatch))
	fmt.Println(err)
	// Output:
	// [<nil> <nil>] 2 true
	// true false
	// true
	// ranks called mismatched collectives: rank 0 called A() as call 4; rank 1 called B() as call 4: tag mismatch
}
