package parallel

import (
	"fmt"
	"strings"
)

// TokenLayout says which tokens of a sequence each context-parallel rank
// holds.
type TokenLayout uint8

const (
	// Zigzag is the load-balanced layout (the default): the sequence is
	// split into 2*CP equal chunks and CP rank r holds chunks r and
	// 2*CP-1-r, in that order, so that every rank gets the same share of
	// causal-attention work. The per-rank token count must be even when
	// CP > 1. With CP = 1 it is the identity.
	Zigzag TokenLayout = iota
	// Contiguous gives CP rank r the r-th of CP equal contiguous blocks.
	Contiguous
)

func (l TokenLayout) String() string {
	switch l {
	case Zigzag:
		return "zigzag"
	case Contiguous:
		return "contiguous"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// Valid reports whether l is a known layout.
func (l TokenLayout) Valid() bool { return l <= Contiguous }

// ParseTokenLayout accepts zigzag (also load_balanced) and contiguous.
func ParseTokenLayout(s string) (TokenLayout, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "zigzag", "load_balanced", "load-balanced":
		return Zigzag, nil
	case "contiguous":
		return Contiguous, nil
	}
	return 0, fmt.Errorf("%w: unknown token layout %q (want zigzag or contiguous)", ErrInvalidArgument, s)
}

// Sharding describes how the tokens of one sequence (one data-parallel
// replica) are spread over a TP × CP mesh: first over the CP ranks by
// Layout, then, with sequence parallelism, each CP rank's tokens in SP equal
// contiguous blocks over its TP ranks (SP = the TP size, or 1 without
// sequence parallelism).
type Sharding struct {
	Layout TokenLayout
	CP, SP int
}

// Check reports whether total tokens can be sharded: CP and SP at least 1,
// every CP rank gets total/CP tokens (even, under Zigzag with CP > 1), and
// SP divides that.
func (s Sharding) Check(total int) error {
	if !s.Layout.Valid() || s.CP < 1 || s.SP < 1 {
		return fmt.Errorf("%w: sharding %+v", ErrInvalidArgument, s)
	}
	if total < 0 {
		return fmt.Errorf("%w: %d tokens", ErrInvalidArgument, total)
	}
	if total%s.CP != 0 {
		return fmt.Errorf("%w: %d tokens do not divide over CP = %d ranks", ErrInvalidArgument, total, s.CP)
	}
	per := total / s.CP
	if s.Layout == Zigzag && s.CP > 1 && per%2 != 0 {
		return fmt.Errorf("%w: %d tokens do not split into 2*CP = %d equal zigzag chunks", ErrInvalidArgument, total, 2*s.CP)
	}
	if per%s.SP != 0 {
		return fmt.Errorf("%w: %d tokens per CP rank do not divide over SP = %d ranks", ErrInvalidArgument, per, s.SP)
	}
	return nil
}

// Rows returns the logical (sequence-order) indices of the tokens that CP
// rank cpRank, SP rank spRank holds, in the order it holds them.
func (s Sharding) Rows(total, cpRank, spRank int) ([]int, error) {
	if err := s.Check(total); err != nil {
		return nil, err
	}
	if cpRank < 0 || cpRank >= s.CP || spRank < 0 || spRank >= s.SP {
		return nil, fmt.Errorf("%w: rank (cp %d, sp %d) outside CP = %d, SP = %d", ErrInvalidArgument, cpRank, spRank, s.CP, s.SP)
	}
	cpRows := cpLocalRows(s.Layout, s.CP, cpRank, total/s.CP)
	per := len(cpRows) / s.SP
	return cpRows[spRank*per : (spRank+1)*per], nil
}

// cpLocalRows are the logical indices of CP rank r's per tokens, in local order.
func cpLocalRows(l TokenLayout, cp, r, per int) []int {
	rows := make([]int, per)
	if l == Contiguous || cp == 1 {
		for i := range rows {
			rows[i] = r*per + i
		}
		return rows
	}
	cs := per / 2
	for i := 0; i < cs; i++ {
		rows[i] = r*cs + i
		rows[cs+i] = (2*cp-1-r)*cs + i
	}
	return rows
}

// gatheredToLogical maps row g of a CP rank-ordered all-gather (rank r's
// per rows at [r*per, (r+1)*per)) to its logical row.
func gatheredToLogical(l TokenLayout, cp, per int) []int {
	out := make([]int, 0, cp*per)
	for r := 0; r < cp; r++ {
		out = append(out, cpLocalRows(l, cp, r, per)...)
	}
	return out
}
