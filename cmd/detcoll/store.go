package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll/store"
)

func init() { extraCommands = append(extraCommands, storeCmd) }

func storeCmd() *cobra.Command {
	var addr, token string
	cmd := &cobra.Command{
		Use:   "store --addr HOST:PORT",
		Short: "Serve a rendezvous store (like torch's TCPStore) until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := store.Listen(addr, token)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "detcoll store listening on %s (token %s)\n", srv.Addr(), map[bool]string{true: "required", false: "not set"}[token != ""])
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	cmd.Flags().StringVar(&addr, "addr", envDefault("DETCOLL_STORE_ADDR", "127.0.0.1:29400"), "listen address; a standalone store should stay on loopback [DETCOLL_STORE_ADDR]")
	cmd.Flags().StringVar(&token, "token", envDefault("DETCOLL_TOKEN", ""), "shared secret checked before any request [DETCOLL_TOKEN]")
	return cmd
}
